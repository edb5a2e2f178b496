"""Reading the audit log: newest first, keyset pagination on ``id``.

The cursor is opaque to clients (base64url of the last id returned); a page
that ends the log has ``next_cursor = null``. Keyset paging stays correct while
new entries arrive: they have larger ids and never shift a later page.
"""

from __future__ import annotations

import binascii
import re
from datetime import datetime
from typing import Any

import msgspec

from control_plane.errors import ValidationFailed
from shared.crypto import b64url_decode, b64url_encode
from shared.db import Connection
from shared.engine.spec_validation import FieldError

DEFAULT_LIMIT = 50
MAX_LIMIT = 200
_CURSOR_PREFIX = "a:"
_ID = re.compile(r"[0-9]{1,19}")
_MAX_BIGINT = 2**63 - 1


class AuditEntry(msgspec.Struct, kw_only=True):
    id: int
    at: datetime
    actor: str
    action: str
    resource_type: str
    resource_name: str
    details: dict[str, Any]


class AuditPage(msgspec.Struct, kw_only=True):
    """One page, newest first; ``next_cursor`` is None on the last page."""

    items: list[AuditEntry]
    next_cursor: str | None


def encode_cursor(last_id: int) -> str:
    """An opaque cursor for the page after ``last_id`` (the call log uses it too)."""
    return b64url_encode(f"{_CURSOR_PREFIX}{last_id}".encode())


def decode_cursor(cursor: str) -> int:
    """The last id a page returned; raises ValidationFailed for a cursor this API did not make."""
    try:
        text = b64url_decode(cursor).decode()
    except (binascii.Error, UnicodeDecodeError):
        text = ""
    number = text.removeprefix(_CURSOR_PREFIX)
    # Ids are bigint: anything longer or larger is not a cursor this API made.
    if not text.startswith(_CURSOR_PREFIX) or not _ID.fullmatch(number):
        raise ValidationFailed([FieldError("cursor", "not a cursor this API returned")])
    last_id = int(number)
    if last_id > _MAX_BIGINT:
        raise ValidationFailed([FieldError("cursor", "not a cursor this API returned")])
    return last_id


def page_start(limit: int, cursor: str | None) -> int | None:
    """The id a keyset page starts below (None: the newest); raises ValidationFailed
    for a limit out of range or a cursor this API did not make (the delivery log uses it too)."""
    if not 1 <= limit <= MAX_LIMIT:
        raise ValidationFailed([FieldError("limit", f"must be between 1 and {MAX_LIMIT}")])
    return decode_cursor(cursor) if cursor else None


def next_page(rows: list[dict[str, Any]], limit: int) -> str | None:
    """The cursor after a page read with ``LIMIT limit + 1``; None when it ends the list."""
    return encode_cursor(rows[limit - 1]["id"]) if len(rows) > limit else None


async def list_audit(
    conn: Connection, workspace_id: int, *, limit: int = DEFAULT_LIMIT, cursor: str | None = None
) -> AuditPage:
    """One page of the workspace's audit log; raises ValidationFailed for a bad limit or cursor."""
    before = page_start(limit, cursor)
    cur = await conn.execute(
        """SELECT id, at, actor, action, resource_type, resource_name, details
             FROM audit_log
            WHERE workspace_id = %(ws)s AND (%(before)s::bigint IS NULL OR id < %(before)s)
            ORDER BY id DESC
            LIMIT %(limit)s""",
        {"ws": workspace_id, "before": before, "limit": limit + 1},
    )
    rows = await cur.fetchall()
    items = [AuditEntry(**row) for row in rows[:limit]]
    return AuditPage(items=items, next_cursor=next_page(rows, limit))
