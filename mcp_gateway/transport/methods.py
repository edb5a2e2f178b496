"""One method→handler table for both protocol eras; each era's framing at the edge
(docs/architecture.md, "Layers of the gateway").

A handler takes the exchange, the message and the era and returns its result;
``answer`` frames it for the era: in 2026-07-28 every result carries
``resultType`` and (but for tools/call, whose ``_meta`` is the tool result's)
the server's identity, list results also ``ttlMs`` (= ``CRANK_MCP_REFRESH_MS``)
and ``cacheScope: private``, since a catalog is per agent key. A handler's
MethodError is a JSON-RPC error inside HTTP 200 in the 2025 era, and carries
its own status in 2026-07-28. Streams (a 2025 GET, ``subscriptions/listen``)
are not methods here: their eras serve them.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from mcp_gateway.transport import calls, tasks
from mcp_gateway.transport.errors import MethodError, ProtocolError
from mcp_gateway.transport.exchange import Exchange
from mcp_gateway.transport.listing import BadCursor, ToolsPage, server_info, tools_page
from mcp_gateway.vocabulary.jsonrpc import (
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    Message,
    encode,
    error,
    result,
)
from mcp_gateway.vocabulary.versions import LEGACY_VERSIONS, MODERN_VERSIONS

META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
SUPPORTED_VERSIONS = [*MODERN_VERSIONS, *reversed(LEGACY_VERSIONS)]

Result = dict[str, Any] | ToolsPage
Handler = Callable[[Exchange, Message, bool], Awaitable[Result]]


@dataclass(frozen=True, slots=True)
class Method:
    handler: Handler
    legacy: bool = True  # served in the 2025 era
    modern: bool = True  # served in 2026-07-28
    cacheable: bool = False  # 2026-07-28: ttlMs and cacheScope
    server_meta: bool = True  # 2026-07-28: the server's identity in _meta


async def _ping(exchange: Exchange, message: Message, legacy: bool) -> Result:
    return {}


async def _tools_list(exchange: Exchange, message: Message, legacy: bool) -> Result:
    try:
        listed = exchange.agent.listed_for(
            exchange.requester.scopes, exchange.state.settings.mcp_tools_page_size
        )
        return tools_page(listed, message.params.get("cursor"), legacy=legacy)
    except BadCursor as exc:  # 400 in 2026-07-28: the revision maps -32602 to 400
        raise MethodError(INVALID_PARAMS, str(exc), status=400) from None


async def _discover(exchange: Exchange, message: Message, legacy: bool) -> Result:
    value: dict[str, Any] = {
        "supportedVersions": SUPPORTED_VERSIONS,
        "capabilities": {
            "tools": {"listChanged": True},
            "prompts": {},
            "resources": {},
            "extensions": {tasks.EXTENSION: {}},  # approvals as tasks
        },
    }
    if exchange.agent.description:
        value["instructions"] = exchange.agent.description
    return value


def _empty(field: str) -> Handler:
    async def handler(exchange: Exchange, message: Message, legacy: bool) -> Result:
        return {field: []}

    return handler


METHODS: dict[str, Method] = {
    "ping": Method(_ping, modern=False),
    "tools/list": Method(_tools_list, cacheable=True),
    "tools/call": Method(calls.tools_call, server_meta=False),
    "server/discover": Method(_discover, legacy=False, cacheable=True),
    "prompts/list": Method(_empty("prompts"), legacy=False, cacheable=True),
    "resources/list": Method(_empty("resources"), legacy=False, cacheable=True),
    "resources/templates/list": Method(_empty("resourceTemplates"), legacy=False, cacheable=True),
    **{name: Method(tasks.serve, legacy=False) for name in tasks.METHODS},
}


def _framed(exchange: Exchange, method: Method, value: dict[str, Any]) -> dict[str, Any]:
    """A 2026-07-28 result's envelope fields."""
    value.setdefault("resultType", "complete")
    if method.cacheable:
        value["ttlMs"] = exchange.state.settings.mcp_refresh_ms
        value["cacheScope"] = "private"
    if method.server_meta:
        value["_meta"] = {META_SERVER_INFO: server_info(exchange.agent)}
    return value


async def answer(exchange: Exchange, message: Message, *, legacy: bool) -> bytes:
    """The JSON-RPC response to one request; in 2026-07-28 a MethodError with a status
    other than 200 raises the ProtocolError that carries it."""
    name = message.method or ""
    method = METHODS.get(name)
    try:
        if method is None or not (method.legacy if legacy else method.modern):
            raise MethodError(METHOD_NOT_FOUND, f"Method not found: {name}", status=404)
        value = await method.handler(exchange, message, legacy)
    except MethodError as exc:
        if legacy or exc.status == 200:
            return encode(error(message.id, exc.code, exc.message, exc.data))
        raise ProtocolError(exc.status, exc.message, code=exc.code, data=exc.data) from None
    if isinstance(value, ToolsPage):
        fields = _framed(exchange, method, {}) if not legacy else {}
        return value.response(message.id, fields)
    if not legacy:
        value = _framed(exchange, method, value)
    return encode(result(message.id, value))
