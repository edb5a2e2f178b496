"""The checks every POST to the MCP endpoint passes, in both protocol eras.

Content-Type (400) → Accept (400) → the key's unfinished bodies (429) → body size
(413) and its time (408; mcp_gateway.transport.body_reads) → JSON, nested at most
``jsonrpc.MAX_DEPTH`` levels (400, -32700) →
batches (400; only the legacy era accepts one, and checks its session and
version itself) → one JSON-RPC message (400, -32600). Each refusal raises
ProtocolError (docs/architecture.md, "Status precedence").
"""

from __future__ import annotations

from typing import Any, Literal, overload

import msgspec

from mcp_gateway.transport.asgi import BodyTooLarge, Headers
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.exchange import Exchange
from mcp_gateway.vocabulary.jsonrpc import (
    INVALID_REQUEST,
    PARSE_ERROR,
    InvalidMessage,
    Message,
    decode,
    parse_message,
)

BATCHES_REFUSED = "JSON-RPC batches exist only in protocol 2025-03-26"


def accepts(headers: Headers) -> tuple[bool, bool] | None:
    """(JSON, SSE) the client accepts for a POST answer; None when it accepts neither.
    A missing Accept or */* gets JSON (docs/architecture.md, "Seed curl sequence")."""
    accept = headers.get("accept")
    if not accept:
        return True, False
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    json_ok = bool(types & {"application/json", "application/*", "*/*"})
    sse_ok = "text/event-stream" in types
    return (json_ok, sse_ok) if json_ok or sse_ok else None


def require_event_stream(headers: Headers, what: str) -> None:
    """A stream (legacy GET, subscriptions/listen) needs Accept: text/event-stream."""
    accepted = accepts(headers)
    if accepted is None or not accepted[1]:
        raise ProtocolError(400, f"{what} needs Accept: text/event-stream", code=INVALID_REQUEST)


@overload
async def read_request(exchange: Exchange, *, batches: Literal[False]) -> Message: ...
@overload
async def read_request(exchange: Exchange, *, batches: bool) -> Message | list[Any]: ...
async def read_request(exchange: Exchange, *, batches: bool) -> Message | list[Any]:
    """The POST body as one JSON-RPC message, or (``batches``) as a batch's raw items.

    Also notes on the exchange whether the answer may be JSON, and may be SSE."""
    headers = exchange.headers
    content_type = (headers.get("content-type") or "").split(";")[0].strip().lower()
    if content_type != "application/json":
        raise ProtocolError(400, "Content-Type must be application/json", code=INVALID_REQUEST)
    accepted = accepts(headers)
    if accepted is None:
        raise ProtocolError(
            400,
            "Accept must allow application/json or text/event-stream",
            code=INVALID_REQUEST,
        )
    exchange.json_answer, exchange.sse_ok = accepted
    try:
        body = await exchange.state.body_reads.read(
            exchange.requester.id, exchange.receive, exchange.state.settings.max_body_bytes
        )
    except BodyTooLarge:
        raise ProtocolError(413, "request body too large", code=INVALID_REQUEST) from None
    try:
        value = decode(body)
    except msgspec.DecodeError as exc:
        raise ProtocolError(400, f"Parse error: {exc}", code=PARSE_ERROR) from None
    if isinstance(value, list):
        if batches:
            if exchange.trace is not None:
                exchange.trace.batch(len(value))
            return value
        raise ProtocolError(400, BATCHES_REFUSED, code=INVALID_REQUEST)
    try:
        message = parse_message(value)
    except InvalidMessage as exc:
        raise ProtocolError(400, str(exc), code=INVALID_REQUEST, rpc_id=exc.request_id) from None
    if exchange.trace is not None:  # the span starts here: its parent may be in _meta
        version = exchange.headers.get("mcp-protocol-version")
        exchange.trace.message(message.method, message.id, message.params.get("_meta"), version)
    return message
