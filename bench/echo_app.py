"""Baseline for bench/gateway_tools_list.py: a bare ASGI app answering a fixed
JSON-RPC result, served by granian exactly like the gateway."""

from __future__ import annotations

from typing import Any

_BODY = b'{"jsonrpc":"2.0","id":1,"result":{}}'


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": _BODY})
