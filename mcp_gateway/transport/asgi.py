"""Bare ASGI plumbing for the lean MCP handler: headers, bodies, answers.

The MCP endpoint is the gateway's hot path, so it runs without a framework
(a lean ASGI handler under granian; docs/architecture.md, "Two processes");
these helpers keep that code readable.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


# An answer sent before the request's body was read leaves that body on the
# connection; the server may then close it, and a client that reuses it fails.
# Saying so makes the client open a new one (docs/architecture.md, "Status precedence").
CLOSE = {"Connection": "close"}


class BodyTooLarge(Exception):
    pass


class Headers:
    """Request headers by lower-case name (the first value of a repeated header)."""

    __slots__ = ("_values",)

    def __init__(self, scope: Scope) -> None:
        values: dict[str, str] = {}
        for raw_name, raw_value in scope["headers"]:
            name = raw_name.decode("latin-1").lower()
            if name not in values:
                values[name] = raw_value.decode("latin-1")
        self._values = values

    def get(self, name: str) -> str | None:
        return self._values.get(name)


def client_address(scope: Scope) -> str:
    """The client's address as the server saw it ("" when unknown, e.g. a Unix socket);
    behind a trusted proxy, the one it forwarded (mcp_gateway.app)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


async def read_body(receive: Receive, limit: int) -> bytes:
    """The whole body; raises BodyTooLarge past ``limit`` bytes; a disconnect ends it early."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            break
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _header_list(headers: dict[str, str] | None) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in (headers or {}).items()]


async def respond(
    send: Send,
    status: int,
    body: bytes = b"",
    *,
    content_type: str | None = "application/json",
    headers: dict[str, str] | None = None,
) -> None:
    """A whole answer at once; the Content-Type header is sent only with a body."""
    raw = _header_list(headers)
    if body and content_type:
        raw.append((b"content-type", content_type.encode()))
    raw.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


async def start_stream(send: Send, headers: dict[str, str] | None = None) -> None:
    """Open a text/event-stream answer; write events with ``send_event``."""
    raw = _header_list(headers)
    raw += [
        (b"content-type", b"text/event-stream"),
        (b"cache-control", b"no-cache, no-transform"),
        (b"x-accel-buffering", b"no"),
    ]
    await send({"type": "http.response.start", "status": 200, "headers": raw})


async def send_event(send: Send, data: bytes, *, event_id: str | None = None) -> None:
    """One SSE ``message`` event, on a stream ``start_stream`` opened."""
    head = b"event: message\n"
    if event_id is not None:
        head += b"id: " + event_id.encode() + b"\n"
    await send(
        {"type": "http.response.body", "body": head + b"data: " + data + b"\n\n", "more_body": True}
    )


async def send_comment(send: Send, text: bytes = b"keep-alive") -> None:
    """An SSE comment: keeps an idle stream open through proxies without an event."""
    await send({"type": "http.response.body", "body": b": " + text + b"\n\n", "more_body": True})


async def end_stream(send: Send) -> None:
    """Ends a stream's HTTP body, with no final event."""
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def wait_disconnect(receive: Receive) -> None:
    """Returns when the client has gone away (the request body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
