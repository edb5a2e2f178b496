"""tools/call through a real gateway in both protocol eras, and the catalog
helpers the tools/call test modules share (publishing through the real
control-plane API)."""

from __future__ import annotations

import json
import re
from typing import Any

import httpx

from shared.engine.request_builder import CONFIRMATION_ARGUMENT, CONFIRMATION_TOKEN_PATTERN
from tests.support.api import auth
from tests.support.mcp import META, modern

LEGACY_VERSION = "2025-06-18"
ERAS = ("legacy", "modern")
BASE = "/api/v1/workspaces/default"
# docs/architecture.md, "Error codes": not recoverable = calling again cannot help (the user
# said no, or an administrator must act); every other code's suggested action calls again.
NOT_RECOVERABLE = frozenset(
    {
        "confirmation_declined",
        "upstream_auth_failed",
        "upstream_response_invalid",
        "upstream_blocked",
        "secret_missing",
        "approval_denied",
    }
)
# The same call, unchanged, may succeed later: only these carry retry_after_s.
TRANSIENT = frozenset(
    {
        "idempotency_in_progress",
        "upstream_rate_limited",
        "upstream_timeout",
        "upstream_unavailable",
        "upstream_error",
        "internal_error",
    }
)
ERROR_FIELDS = {"error_code", "message", "recoverable", "suggested_action", "request_id"}


async def ok(response: Any) -> Any:
    assert response.is_success, response.text
    return response


async def publish_operation(
    client: httpx.AsyncClient, admin: str, spec: dict[str, Any], *, base: str = BASE
) -> None:
    created = await ok(await client.post(f"{base}/operations", json=spec, headers=auth(admin)))
    await ok(
        await client.post(
            f"{base}/operations/{spec['name']}/publish",
            headers=auth(admin, created.headers["etag"]),
        )
    )


async def publish_agent(
    client: httpx.AsyncClient, admin: str, slug: str, operations: list[str], *, base: str = BASE
) -> str:
    """Publishes the agent (in the workspace at ``base``) and returns a new agent key for it."""
    body = {"slug": slug, "description": f"The {slug} agent.", "operations": operations}
    agent = await ok(await client.post(f"{base}/agents", json=body, headers=auth(admin)))
    await ok(
        await client.post(
            f"{base}/agents/{slug}/publish", headers=auth(admin, agent.headers["etag"])
        )
    )
    key = await ok(await client.post(f"{base}/keys", json={"agent": slug}, headers=auth(admin)))
    return str(key.json()["key"])


def rpc(method: str, params: dict[str, Any], id_: int = 3) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": params}


async def open_session(http: httpx.AsyncClient, path: str, key: str) -> str:
    init = rpc(
        "initialize",
        {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "tests", "version": "1"},
        },
        id_=1,
    )
    response = await http.post(path, json=init, headers=legacy_headers(key))
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


def legacy_headers(key: str, session_id: str | None = None) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }
    if session_id is not None:
        headers |= {"MCP-Session-Id": session_id, "MCP-Protocol-Version": LEGACY_VERSION}
    return headers


class Caller:
    """tools/call for one agent key, in the era asked for (a legacy session is opened once)."""

    def __init__(self, http: httpx.AsyncClient, path: str, key: str) -> None:
        self.http, self.path, self.key = http, path, key
        self._session: str | None = None

    async def raw(self, era: str, name: str, arguments: Any) -> httpx.Response:
        params = {"name": name, "arguments": arguments}
        if era == "modern":
            return await self.http.post(
                self.path,
                json=rpc("tools/call", {**params, "_meta": META}),
                headers=modern(self.key, "tools/call", **{"Mcp-Name": name}),
            )
        if self._session is None:
            self._session = await open_session(self.http, self.path, self.key)
        return await self.http.post(
            self.path,
            json=rpc("tools/call", params),
            headers=legacy_headers(self.key, self._session),
        )

    async def call(self, era: str, name: str, arguments: Any) -> dict[str, Any]:
        """The tool result of a tools/call answered with HTTP 200 and a JSON-RPC result."""
        response = await self.raw(era, name, arguments)
        assert response.status_code == 200, response.text
        assert response.headers["content-type"].startswith("application/json")
        message = response.json()
        assert "result" in message, message
        result: dict[str, Any] = message["result"]
        if era == "modern":
            assert result["resultType"] == "complete"
        # The text copy carries exactly the structured content; an approval_required
        # answer adds the plain words that tell the model to call again.
        structured = result["structuredContent"]
        waiting = isinstance(structured, dict) and structured.get("status") == "approval_required"
        assert [c["type"] for c in result["content"]] == ["text"] * (2 if waiting else 1)
        assert json.loads(result["content"][0]["text"]) == structured
        if waiting:
            plain = result["content"][1]["text"]
            assert "same arguments" in plain or "теми же аргументами" in plain, plain
        return result


def assert_tool_error(result: dict[str, Any], code: str) -> dict[str, Any]:
    """The structured error of docs/architecture.md, "Error codes": its fields, code and recoverability."""
    assert result["isError"] is True, result
    error: dict[str, Any] = result["structuredContent"]
    assert error["error_code"] == code, error
    token = {"confirmation_token"} if code == "confirmation_required" else set()
    assert ERROR_FIELDS | token <= set(error) <= ERROR_FIELDS | token | {"retry_after_s"}, error
    assert error["recoverable"] is (code not in NOT_RECOVERABLE)
    assert error["request_id"].startswith("req_")
    assert error["message"]
    assert error["suggested_action"]
    if "retry_after_s" in error:
        assert code in TRANSIENT
    return error


_TOKEN_IN_MESSAGE = re.compile(r'_crank_confirmation_token="(ct_[A-Za-z0-9_-]+)"')


def token_of(result: dict[str, Any]) -> str:
    """The token of a ``confirmation_required`` answer: its own field, the same as the
    one in the message."""
    error = assert_tool_error(result, "confirmation_required")
    found = _TOKEN_IN_MESSAGE.search(error["message"])
    assert found, error
    assert error["confirmation_token"] == found[1], error
    assert re.fullmatch(CONFIRMATION_TOKEN_PATTERN, found[1])
    return found[1]


def confirmed(arguments: dict[str, Any], token: str) -> dict[str, Any]:
    """``arguments`` with the confirmation token added."""
    return {**arguments, CONFIRMATION_ARGUMENT: token}
