"""The modern protocol era (2026-07-28): stateless requests, no sessions.

Each request carries its protocol version and client capabilities in
``params._meta``; the checks run in the order the revision and the official
SDK use: the envelope (400, -32602), then the routing headers against the body
(400, -32020), then the version (400, -32022). Removed and unknown methods
answer 404 with -32601. Every result carries ``resultType``; list results also
``ttlMs`` (= ``CRANK_MCP_REFRESH_MS``) and ``cacheScope: private``, since a
catalog is per agent key.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

import msgspec

from mcp_gateway.asgi import BodyTooLarge, read_body
from mcp_gateway.call import LEGACY_VERSIONS, MODERN_VERSIONS, Call, accepts, json_content
from mcp_gateway.catalog import BadCursor, server_info, tools_list_response
from mcp_gateway.jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    UNSUPPORTED_VERSION,
    InvalidMessage,
    Message,
    decode,
    encode,
    error,
    parse_message,
    result,
)
from mcp_gateway.metrics import REQUESTS
from mcp_gateway.rate_limits import MethodClass
from mcp_gateway.streams import LIST_CHANGED, serve_stream
from mcp_gateway.tool_call import tools_call

META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
SUPPORTED_VERSIONS = [*MODERN_VERSIONS, *reversed(LEGACY_VERSIONS)]
# Methods with the body field that Mcp-Name must repeat.
_NAMED = {"tools/call": "name", "prompts/get": "name", "resources/read": "uri"}


class Refusal(Exception):
    def __init__(self, status: int, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.data = status, code, message, data


async def handle(call: Call, method: str, version_header: str) -> None:
    if method != "POST":
        # No sessions and no standalone stream in 2026-07-28: subscriptions/listen replaces GET.
        await call.answer(405, headers={"Allow": "POST"})
        return
    request_id: Any = None
    try:
        message = await _read(call)
        request_id = message.id
        call.rpc_method = message.method or "response"
        kind: MethodClass = "tools_call" if message.method == "tools/call" else "other"
        if not await call.admit(kind, message.id):
            return
        if not message.is_request:
            await call.answer(202)
            return
        _check_envelope(call, message, version_header)
        await _dispatch(call, message)
    except Refusal as refusal:
        body = encode(error(request_id, refusal.code, refusal.message, refusal.data))
        await call.answer(refusal.status, body)


async def _read(call: Call) -> Message:
    if not json_content(call.headers):
        raise Refusal(400, INVALID_REQUEST, "Content-Type must be application/json")
    if accepts(call.headers) is None:
        raise Refusal(
            400, INVALID_REQUEST, "Accept must allow application/json or text/event-stream"
        )
    try:
        body = await read_body(call.receive, call.state.settings.max_body_bytes)
    except BodyTooLarge:
        raise Refusal(413, INVALID_REQUEST, "request body too large") from None
    try:
        value = decode(body)
    except msgspec.DecodeError as exc:
        raise Refusal(400, PARSE_ERROR, f"Parse error: {exc}") from None
    if isinstance(value, list):
        raise Refusal(400, INVALID_REQUEST, "JSON-RPC batches are not part of protocol 2026-07-28")
    try:
        return parse_message(value)
    except InvalidMessage as exc:
        raise Refusal(400, INVALID_REQUEST, str(exc)) from None


def _header_value(raw: str) -> str:
    """Trim, and decode the ``=?base64?...?=`` form clients use for non-ASCII values."""
    value = raw.strip()
    if value.startswith("=?base64?") and value.endswith("?="):
        try:
            return base64.b64decode(value[9:-2], validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            raise Refusal(400, HEADER_MISMATCH, "Mcp-Name is not valid base64") from None
    return value


def _check_envelope(call: Call, message: Message, version_header: str) -> None:
    meta = message.params.get("_meta")
    if not isinstance(meta, dict) or META_VERSION not in meta or META_CAPABILITIES not in meta:
        raise Refusal(
            400,
            INVALID_PARAMS,
            f"params._meta must carry {META_VERSION!r} and {META_CAPABILITIES!r}",
        )
    if meta[META_VERSION] != version_header:
        raise Refusal(
            400,
            HEADER_MISMATCH,
            f"MCP-Protocol-Version {version_header!r} differs from _meta {meta[META_VERSION]!r}",
        )
    method_header = call.headers.get("mcp-method")
    if method_header is None or method_header.strip() != message.method:
        raise Refusal(400, HEADER_MISMATCH, f"Mcp-Method header must be {message.method!r}")
    field = _NAMED.get(message.method or "")
    if field is not None:
        name_header = call.headers.get("mcp-name")
        if name_header is None or _header_value(name_header) != message.params.get(field):
            raise Refusal(400, HEADER_MISMATCH, f"Mcp-Name header must equal params.{field}")
    if version_header not in MODERN_VERSIONS:
        raise Refusal(
            400,
            UNSUPPORTED_VERSION,
            "Unsupported protocol version",
            {"supported": SUPPORTED_VERSIONS, "requested": version_header},
        )


def _complete(call: Call, value: dict[str, Any], *, cacheable: bool = False) -> dict[str, Any]:
    value["resultType"] = "complete"
    if cacheable:
        value["ttlMs"] = call.state.settings.mcp_refresh_ms
        value["cacheScope"] = "private"
    value["_meta"] = {META_SERVER_INFO: server_info(call.agent)}
    return value


def _discover(call: Call) -> dict[str, Any]:
    value: dict[str, Any] = {
        "supportedVersions": SUPPORTED_VERSIONS,
        "capabilities": {"tools": {"listChanged": True}, "prompts": {}, "resources": {}},
    }
    if call.agent.description:
        value["instructions"] = call.agent.description
    return _complete(call, value, cacheable=True)


async def _dispatch(call: Call, message: Message) -> None:
    method = message.method
    if method == "subscriptions/listen":
        await _listen(call, message)
        return
    if method == "server/discover":
        body = encode(result(message.id, _discover(call)))
    elif method == "tools/list":
        extra = _complete(call, {}, cacheable=True)
        try:
            body = tools_list_response(
                message.id, call.agent, message.params.get("cursor"), extra, modern=True
            )
        except BadCursor as exc:
            raise Refusal(400, INVALID_PARAMS, str(exc)) from None
    elif method == "tools/call":
        # An unknown tool is -32602 in HTTP 200, as in the legacy era (DESIGN "Status precedence").
        body = await tools_call(call, message, modern=True)
    elif method in ("prompts/list", "resources/list", "resources/templates/list"):
        field = {"prompts/list": "prompts", "resources/list": "resources"}.get(
            method, "resourceTemplates"
        )
        body = encode(result(message.id, _complete(call, {field: []}, cacheable=True)))
    else:
        raise Refusal(404, METHOD_NOT_FOUND, f"Method not found: {method}")
    await call.reply(body)


async def _listen(call: Call, message: Message) -> None:
    """subscriptions/listen: an SSE stream, acknowledged first, then list_changed events."""
    accepted = accepts(call.headers)
    if accepted is None or not accepted[1]:
        raise Refusal(400, INVALID_REQUEST, "subscriptions/listen needs Accept: text/event-stream")
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
    REQUESTS.labels("subscriptions/listen", "200").inc()
    await serve_stream(
        call.state.streams,
        call.agent.id,
        call.receive,
        call.send,
        first=ack,
        render=lambda event: changed if wants_tools and event == LIST_CHANGED else None,
        ended=lambda: False,
    )
