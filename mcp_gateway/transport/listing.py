"""Answers that come straight from the snapshot: tools/list pages, server identity.

Pages are serialized once per snapshot; an answer splices the page's bytes
into the JSON-RPC envelope instead of encoding the tools again.

Paging (docs/architecture.md, "Tools/list paging"): ``CRANK_MCP_TOOLS_PAGE_SIZE`` tools per
page, in the order the agent binds them; every page but the last carries
``nextCursor``. A cursor names the page and the agent's list fingerprint, so
it works on every replica that serves the same list, and a cursor issued
before the list changed is refused instead of silently skipping or repeating
tools. A caller whose token lacks some tools' scopes sees a list without
them, with its own fingerprint (docs/architecture.md, "Identity"). A cursor this server cannot use raises ``BadCursor``, which both eras
answer with JSON-RPC -32602 (mcp_gateway.transport.methods).
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, NamedTuple

from mcp_gateway.catalog.snapshot import Agent, ToolList
from mcp_gateway.vocabulary.jsonrpc import RequestId, encode

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


def _list_tag(listed: ToolList) -> str:
    return listed.fingerprint[:6].hex()


def _page_index(cursor: Any, listed: ToolList, pages: int) -> int:
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
    if tag != _list_tag(listed):
        raise BadCursor("the tool list changed since this cursor was issued; list from the start")
    if not 0 < index < pages:
        raise BadCursor("cursor is not one this server issued")
    return index


def _cursor(index: int, listed: ToolList) -> str:
    return base64.urlsafe_b64encode(f"{index}:{_list_tag(listed)}".encode()).decode()


class ToolsPage(NamedTuple):
    """One tools/list page: the serialized tools and, unless it is the last, the next cursor."""

    tools: bytes  # a JSON array, serialized once per snapshot
    next_cursor: str | None

    def response(self, request_id: RequestId | None, fields: dict[str, Any]) -> bytes:
        """The whole JSON-RPC response: ``fields`` then ``nextCursor`` follow ``tools``."""
        if self.next_cursor is not None:
            fields = {**fields, "nextCursor": self.next_cursor}
        tail = encode(fields)  # b"{...}" — its members follow "tools"
        members = b"," + tail[1:] if len(tail) > 2 else b"}"
        return (
            b'{"jsonrpc":"2.0","id":'
            + encode(request_id)
            + b',"result":{"tools":'
            + self.tools
            + members
            + b"}"
        )


def tools_page(listed: ToolList, cursor: Any, *, legacy: bool) -> ToolsPage:
    """The page ``cursor`` names (the first without one), as the era lists it.
    ``listed``: what the caller may see (``Agent.listed_for``)."""
    pages = listed.pages if legacy else listed.modern_pages
    index = _page_index(cursor, listed, len(pages))
    following = _cursor(index + 1, listed) if index + 1 < len(pages) else None
    return ToolsPage(pages[index], following)
