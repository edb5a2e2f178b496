"""Answers that come straight from the snapshot: tools/list pages, server identity.

Pages are serialized once per snapshot; an answer splices the page's bytes
into the JSON-RPC envelope instead of encoding the tools again.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any

from mcp_gateway.jsonrpc import RequestId, encode
from mcp_gateway.snapshot import Agent

SERVER_NAME = "crank"
SERVER_VERSION = "0.1.0"


class BadCursor(ValueError):
    pass


def server_info(agent: Agent) -> dict[str, Any]:
    info: dict[str, Any] = {"name": SERVER_NAME, "version": SERVER_VERSION}
    if agent.title:
        info["title"] = agent.title
    return info


def _page_index(cursor: Any, pages: int) -> int:
    if cursor is None:
        return 0
    if not isinstance(cursor, str):
        raise BadCursor("cursor must be a string")
    try:
        index = int(base64.urlsafe_b64decode(cursor.encode()).decode().removeprefix("page:"))
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise BadCursor("cursor is not one this server issued") from None
    if not 0 < index < pages:
        raise BadCursor("cursor is out of range (the catalog changed?); list from the start")
    return index


def _cursor(index: int) -> str:
    return base64.urlsafe_b64encode(f"page:{index}".encode()).decode()


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
    index = _page_index(cursor, len(pages))
    fields: dict[str, Any] = dict(extra or {})
    if index + 1 < len(pages):
        fields["nextCursor"] = _cursor(index + 1)
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
