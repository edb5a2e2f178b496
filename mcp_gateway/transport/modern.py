"""The modern protocol era (2026-07-28): stateless requests, no sessions.

Each request carries its protocol version and client capabilities in
``params._meta``; the checks run in the order the revision and the official
SDK use: the envelope (400, -32602), then the routing headers against the body
(400, -32020), then the version (400, -32022). The methods and their results'
framing are in mcp_gateway.transport.methods; ``subscriptions/listen`` is this
era's stream.
"""

from __future__ import annotations

import base64
import binascii

from mcp_gateway.transport import methods, tasks
from mcp_gateway.transport.checks import read_request, require_event_stream
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.exchange import Exchange
from mcp_gateway.transport.methods import SUPPORTED_VERSIONS
from mcp_gateway.transport.rate_limits import MethodClass
from mcp_gateway.transport.streams import LIST_CHANGED
from mcp_gateway.vocabulary.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    UNSUPPORTED_VERSION,
    Message,
    encode,
)
from mcp_gateway.vocabulary.versions import META_CAPABILITIES, MODERN_VERSIONS

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
# Methods with the body field that Mcp-Name must repeat.
_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}
_NAMED |= dict.fromkeys(tasks.METHODS, "taskId")  # the tasks extension's routing
_ALLOW = {"Allow": "POST"}


async def handle(exchange: Exchange, method: str, version_header: str) -> None:
    if method != "POST":
        # No sessions and no standalone stream in 2026-07-28: subscriptions/listen replaces GET.
        raise ProtocolError(405, "method not allowed", code=None, headers=_ALLOW)
    message = await read_request(exchange, batches=False)
    exchange.rpc_method = message.method or "response"
    try:
        kind: MethodClass = "tools_call" if message.method == "tools/call" else "other"
        exchange.admit(kind, message.id)
        if not message.is_request:
            await exchange.answer(202)
            return
        _check_envelope(exchange, message, version_header)
        await _dispatch(exchange, message)
    except ProtocolError as problem:
        problem.rpc_id = message.id  # every refusal after the read answers the request's id
        raise


def _header_value(raw: str) -> str:
    """Trim, and decode the ``=?base64?...?=`` form clients use for non-ASCII values."""
    value = raw.strip()
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise ProtocolError(400, "Mcp-Name is not valid base64", code=HEADER_MISMATCH) from None
    return value


def _check_envelope(exchange: Exchange, message: Message, version_header: str) -> None:
    meta = message.params.get("_meta")
    if not isinstance(meta, dict) or META_VERSION not in meta or META_CAPABILITIES not in meta:
        raise ProtocolError(
            400,
            f"params._meta must carry {META_VERSION!r} and {META_CAPABILITIES!r}",
            code=INVALID_PARAMS,
        )
    if meta[META_VERSION] != version_header:
        raise ProtocolError(
            400,
            f"MCP-Protocol-Version {version_header!r} differs from _meta {meta[META_VERSION]!r}",
            code=HEADER_MISMATCH,
        )
    method_header = exchange.headers.get("mcp-method")
    if method_header is None or method_header.strip() != message.method:
        raise ProtocolError(
            400, f"Mcp-Method header must be {message.method!r}", code=HEADER_MISMATCH
        )
    field = _NAMED.get(message.method or "")
    if field is not None:
        name_header = exchange.headers.get("mcp-name")
        if name_header is None or _header_value(name_header) != message.params.get(field):
            raise ProtocolError(
                400, f"Mcp-Name header must equal params.{field}", code=HEADER_MISMATCH
            )
    if version_header not in MODERN_VERSIONS:
        raise ProtocolError(
            400,
            "Unsupported protocol version",
            code=UNSUPPORTED_VERSION,
            data={"supported": SUPPORTED_VERSIONS, "requested": version_header},
        )


async def _dispatch(exchange: Exchange, message: Message) -> None:
    if message.method == "subscriptions/listen":
        await _listen(exchange, message)
        return
    await exchange.reply(await methods.answer(exchange, message, legacy=False))


async def _listen(exchange: Exchange, message: Message) -> None:
    """subscriptions/listen: an SSE stream, acknowledged first, then list_changed events."""
    require_event_stream(exchange.headers, "subscriptions/listen")
    requested = message.params.get("notifications")
    wants_tools = isinstance(requested, dict) and requested.get("toolsListChanged") is True
    subscription = {META_SUBSCRIPTION: message.id}
    honoured = {"toolsListChanged": True} if wants_tools else {}
    ack = encode(
        {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": subscription, "notifications": honoured},
        }
    )
    changed = encode({"jsonrpc": "2.0", "method": LIST_CHANGED, "params": {"_meta": subscription}})
    await exchange.stream(
        "subscriptions/listen",
        ack,
        lambda event: changed if wants_tools and event == LIST_CHANGED else None,
        lambda: False,
    )
