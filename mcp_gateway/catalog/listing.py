"""Answers that come straight from the snapshot: tools/list pages, server identity.

Pages are serialized once per snapshot; an answer splices the page's bytes
into the JSON-RPC envelope instead of encoding the tools again.

Paging (docs/architecture.md, "Tools/list paging"): ``CRANK_MCP_TOOLS_PAGE_SIZE`` tools per
page, in the order the agent binds them; every page but the last carries
``nextCursor``. A cursor names the page and the agent's list fingerprint, so
it works on every replica that serves the same list, and a cursor issued
before the list changed is refused instead of silently skipping or repeating
tools. A cursor this server cannot use raises ``BadCursor``, which both eras
answer with JSON-RPC -32602: inside HTTP 200 in the legacy era (like every
JSON-RPC error there), HTTP 400 in the 2026-07-28 era (the revision maps
-32602 to 400).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from mcp_gateway.catalog.snapshot import Agent
from mcp_gateway.transport.jsonrpc import RequestId, encode

SERVER_NAME = "crank"
SERVER_VERSION = "0.1.0"


class BadCursor(ValueError):
    """A tools/list cursor this server cannot use; answered as JSON-RPC -32602."""

    pass


def server_info(agent: Agent) -> dict[str, Any]:
    """MCP ``serverInfo``: Crank's name and version, and the agent's title when it has one."""
    info: dict[str, Any] = {"name": SERVER_NAME, "version": SERVER_VERSION}
    if agent.title:
        info["title"] = agent.title
    return info


def _list_tag(agent: Agent) -> str:
    return agent.fingerprint[:6].hex()


def _page_index(cursor: Any, agent: Agent, pages: int) -> int:
    if cursor is None:
        return 0
    if not isinstance(cursor, str):
        raise BadCursor("cursor must be a string")
    try:
        page, colon, tag = base64.urlsafe_b64decode(cursor.encode()).decode().partition(":")
        index = int(page)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadCursor("cursor is not one this server issued") from None
    if not colon:
        raise BadCursor("cursor is not one this server issued")
    if tag != _list_tag(agent):
        raise BadCursor("the tool list changed since this cursor was issued; list from the start")
    if not 0 < index < pages:
        raise BadCursor("cursor is not one this server issued")
    return index


def _cursor(index: int, agent: Agent) -> str:
    return base64.urlsafe_b64encode(f"{index}:{_list_tag(agent)}".encode()).decode()


def tools_list_response(
    request_id: RequestId | None,
    agent: Agent,
    cursor: Any,
    extra: dict[str, Any] | None = None,
    *,
    modern: bool = False,
) -> bytes:
    """The whole JSON-RPC response for one tools/list page; ``extra`` adds result fields."""
    pages = agent.modern_pages if modern else agent.pages
    index = _page_index(cursor, agent, len(pages))
    fields: dict[str, Any] = dict(extra or {})
    if index + 1 < len(pages):
        fields["nextCursor"] = _cursor(index + 1, agent)
    tail = encode(fields)  # b"{...}" — its members follow "tools"
    members = b"," + tail[1:] if len(tail) > 2 else b"}"
    return (
        b'{"jsonrpc":"2.0","id":'
        + encode(request_id)
        + b',"result":{"tools":'
        + pages[index]
        + members
        + b"}"
    )
