"""A bug on the MCP endpoint answers a JSON-RPC error without a traceback, and is logged."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from structlog.testing import capture_logs

from mcp_gateway.transport import endpoint


async def test_an_unexpected_exception_is_a_jsonrpc_500_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def broken(*args: Any) -> Any:
        raise RuntimeError("secret internals at /srv/crank/module.py line 42")

    monkeypatch.setattr(endpoint, "authenticate_requester", broken)
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    scope = {"type": "http", "method": "POST", "path": "/mcp/v1/w/a", "headers": []}
    with capture_logs() as logs:
        await endpoint.handle(None, scope, receive, send, "w", "a")  # type: ignore[arg-type]

    assert [entry["event"] for entry in logs] == ["mcp_endpoint_failed"]

    assert sent[0]["status"] == 500
    body = msgspec.json.decode(sent[1]["body"])
    assert body["error"] == {"code": -32603, "message": "internal error; retry later"}
    assert b"secret internals" not in sent[1]["body"]
