"""A loopback proxy that adds ``Authorization: Bearer <key>`` to every request.

The MCP conformance suite cannot send an Authorization header, and the gateway
refuses every request without one (401). The proxy sits between the two on
127.0.0.1 and is otherwise transparent:

- method, path, query and body go through unchanged;
- every request header goes through except the hop-by-hop ones, including
  ``Host`` and ``Origin`` exactly as the client sent them, so the gateway
  itself decides the suite's DNS-rebinding probes (``Host: evil.example.com``
  with ``Origin: http://evil.example.com`` must be refused, the real loopback
  host and origin accepted);
- the response status, headers and body come back as they are, and an SSE
  body is streamed chunk by chunk as it arrives (never buffered), so the
  suite's "first event within 2 s" checks see the gateway's timing;
- when the client goes away, the upstream request is cancelled with it.

Used in-process by tests/gateway/transport/test_conformance.py (``serve_auth_proxy``);
also runnable by hand::

    CRANK_PROXY_KEY=crk_agent_... python -m tests.support.auth_proxy http://127.0.0.1:8080 --port 3000
"""

from __future__ import annotations

import argparse
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

# RFC 9110 7.6.1 connection-specific fields, plus the ones aiohttp sets itself from the body.
_HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
    }
)
_REQUEST_DROPPED = _HOP_BY_HOP | {"content-length", "authorization"}
_RESPONSE_DROPPED = _HOP_BY_HOP | {"content-length"}

_TARGET = web.AppKey("target", str)
_KEY = web.AppKey("key", str)
_SESSION = web.AppKey("session", aiohttp.ClientSession)


async def _forward(request: web.Request) -> web.StreamResponse:
    headers = CIMultiDict(
        (name, value)
        for name, value in request.headers.items()
        if name.lower() not in _REQUEST_DROPPED
    )
    headers["Authorization"] = f"Bearer {request.app[_KEY]}"
    body = await request.read()
    url = request.app[_TARGET] + request.rel_url.raw_path_qs
    async with request.app[_SESSION].request(
        request.method,
        url,
        headers=headers,
        data=body if body else None,
        allow_redirects=False,
        # Each response goes through as it came, compressed or not.
        auto_decompress=False,
    ) as upstream:
        response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
        for name, value in upstream.headers.items():
            if name.lower() not in _RESPONSE_DROPPED:
                response.headers.add(name, value)
        if upstream.content_length is not None:
            response.content_length = upstream.content_length
        await response.prepare(request)
        async for chunk in upstream.content.iter_any():
            await response.write(chunk)
        await response.write_eof()
        return response


async def _open_session(app: web.Application) -> AsyncIterator[None]:
    # No read timeout: a GET or subscriptions/listen stream may stay quiet for long.
    timeout = aiohttp.ClientTimeout(total=None, connect=10, sock_read=None)
    # skip_auto_headers: no User-Agent or Accept-Encoding of the proxy's own.
    async with aiohttp.ClientSession(
        timeout=timeout, skip_auto_headers=("User-Agent", "Accept-Encoding")
    ) as session:
        app[_SESSION] = session
        yield


def create_proxy_app(target: str, key: str) -> web.Application:
    """The proxy application; ``target`` is the gateway's base URL (scheme, host, port)."""
    app = web.Application(client_max_size=16 * 1024 * 1024)
    app[_TARGET] = target.rstrip("/")
    app[_KEY] = key
    app.cleanup_ctx.append(_open_session)
    app.router.add_route("*", "/{tail:.*}", _forward)
    return app


@asynccontextmanager
async def serve_auth_proxy(
    target: str, key: str, host: str = "127.0.0.1", port: int = 0
) -> AsyncIterator[str]:
    """Run the proxy on the current event loop; yields its base URL."""
    # handler_cancellation: a client that drops its stream also ends the upstream one.
    runner = web.AppRunner(
        create_proxy_app(target, key), handler_cancellation=True, access_log=None
    )
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    try:
        bound = runner.addresses[0][1]
        yield f"http://{host}:{bound}"
    finally:
        await runner.cleanup()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("target", help="the gateway's base URL, e.g. http://127.0.0.1:8080")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=3000)
    args = parser.parse_args()
    key = os.environ.get("CRANK_PROXY_KEY")
    if not key:
        parser.error("set CRANK_PROXY_KEY to the agent API key to add")
    web.run_app(
        create_proxy_app(args.target, key),
        host=args.host,
        port=args.port,
        handler_cancellation=True,
    )


if __name__ == "__main__":
    main()
