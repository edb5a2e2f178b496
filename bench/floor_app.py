"""The floor of bench/gateway_tools_call.py: granian plus one upstream GET, nothing else.

A bare ASGI app that answers every request with the upstream's body, fetched
through Crank's own ``UpstreamExecutor`` (the SSRF guard included), with no
MCP, no validation, no selection, no call log. The gateway cannot be faster
than this on the same machine, so its row shows how much of the gateway's
time is the server and the HTTP client rather than Crank's own work.

``CRANK_FLOOR_UPSTREAM`` is the URL to fetch (a loopback address, which the
app's policy allowlists).
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import urlsplit

from shared.engine.outbound import UpstreamExecutor, UpstreamRequest
from shared.engine.ssrf import AddressPolicy

_URL = os.environ.get("CRANK_FLOOR_UPSTREAM", "http://127.0.0.1:9/")
_HEADERS = [(b"content-type", b"application/json")]
_target = urlsplit(_URL)


def _policy() -> AddressPolicy:
    return AddressPolicy.from_settings(
        allow_private_upstreams=False,
        upstream_allowlist=(f"{_target.hostname}:{_target.port}",),
    )


_executor = UpstreamExecutor(_policy())
_request = UpstreamRequest(method="GET", url=_URL, headers=(("Accept", "application/json"),))


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await _executor.start()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await _executor.close()
                await send({"type": "lifespan.shutdown.complete"})
                return
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    answer = await _executor.execute(_request)
    await send({"type": "http.response.start", "status": answer.status, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": answer.body})
