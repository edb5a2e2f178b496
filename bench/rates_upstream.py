"""The local upstream of bench/gateway_tools_call.py: a bare ASGI app under granian.

``GET /v1/latest?base=USD&symbols=EUR`` answers a frankfurter-like body (the
same as https://api.frankfurter.dev/v1/latest would, with fixed figures);
``GET /_count`` answers how many ``/v1/latest`` requests this process served,
so the bench can check that every tools/call reached the upstream once.
A bare ASGI app is the fastest thing the pinned toolchain serves over HTTP
(≈ 7,500 req/s on one core of this kind of machine), so the direct figure is a hard ceiling.
"""

from __future__ import annotations

from typing import Any

DATE = "2026-01-02"
RATE = 0.9123
_HEADERS = [(b"content-type", b"application/json")]
_NOT_FOUND = b'{"message":"not found"}'
_bodies: dict[bytes, bytes] = {}
_served = 0


def rates_body(base: str, symbols: str) -> bytes:
    rates = ",".join(f'"{symbol}":{RATE}' for symbol in symbols.split(",") if symbol)
    return f'{{"amount":1.0,"base":"{base}","date":"{DATE}","rates":{{{rates}}}}}'.encode()


def _body_for(query: bytes) -> bytes:
    body = _bodies.get(query)
    if body is None:
        params = dict(part.partition(b"=")[::2] for part in query.split(b"&"))
        base = params.get(b"base", b"EUR").decode("latin-1")
        symbols = params.get(b"symbols", b"USD").decode("latin-1")
        body = rates_body(base, symbols)
        if len(_bodies) < 1024:
            _bodies[query] = body
    return body


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    global _served
    if scope["type"] != "http":
        return
    path = scope["path"]
    status = 200
    if path == "/v1/latest":
        _served += 1
        body = _body_for(scope["query_string"])
    elif path == "/_count":
        body = str(_served).encode()
    else:
        status, body = 404, _NOT_FOUND
    await send({"type": "http.response.start", "status": status, "headers": _HEADERS})
    await send({"type": "http.response.body", "body": body})
