"""The local upstream of bench/approvals_throughput.py: a bare ASGI app under granian.

``POST /orders`` (any body, drained) answers ``{"id": "ord-<key>", "key": "<key>"}``
where ``<key>`` is the request's ``Idempotency-Key`` header, and counts the
request under that key; ``GET /_counts`` answers the counts as a JSON object
(``{key: requests}``), so the bench can check that every approved call reached
the upstream exactly once. Like bench/rates_upstream.py it is the fastest
thing the pinned toolchain serves over HTTP, so it never bounds the figure.
"""

from __future__ import annotations

import json
from typing import Any

_HEADERS = [(b"content-type", b"application/json")]
_NOT_FOUND = b'{"message":"not found"}'
_counts: dict[str, int] = {}


async def _drain(receive: Any) -> None:
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)


def _key(scope: dict[str, Any]) -> str:
    for name, value in scope["headers"]:
        if name == b"idempotency-key":
            return str(value.decode("latin-1"))
    return ""


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    path = scope["path"]
    status = 200
    if path == "/orders" and scope["method"] == "POST":
        await _drain(receive)
        key = _key(scope)
        _counts[key] = _counts.get(key, 0) + 1
        status, body = 201, json.dumps({"id": f"ord-{key}", "key": key}).encode()
    elif path == "/_counts":
        body = json.dumps(_counts).encode()
    else:
        status, body = 404, _NOT_FOUND
    await send({"type": "http.response.start", "status": status, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": body})
