"""Reading the audit log: newest first, keyset pagination on ``id``, optional filters
(action, actor, resource, time range).

The cursor is opaque to clients (base64url of the last id returned); a page
that ends the log has ``next_cursor = null``. Keyset paging stays correct while
new entries arrive: they have larger ids and never shift a later page.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
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


class AuditFilters(msgspec.Struct, kw_only=True):
    """``action``: exactly, or every action it starts when it has no dot
    (``agent`` → ``agent.*``); ``actor``: a part of it, any case; ``resource``: the
    resource's name or its type, exactly; ``since`` inclusive, ``until`` exclusive."""

    action: str | None = None
    actor: str | None = None
    resource: str | None = None
    since: datetime | None = None
    until: datetime | None = None


_MAX_FILTER_CHARS = 200


def as_utc(moment: datetime | None) -> datetime | None:
    """A time without an offset is UTC (what the console's time fields send)."""
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


def time_range_problems(since: datetime | None, until: datetime | None) -> list[FieldError]:
    """A range that is empty by construction, named as the API's and the console's
    ``from``/``to`` parameters (the call log uses it too)."""
    if since is not None and until is not None and until <= since:
        return [FieldError("to", "must be after from")]
    return []


def _check(filters: AuditFilters) -> None:
    problems = [
        FieldError(name, f"at most {_MAX_FILTER_CHARS} characters, no NUL")
        for name in ("action", "actor", "resource")
        if (value := getattr(filters, name)) is not None
        and (len(value) > _MAX_FILTER_CHARS or "\x00" in value)
    ]
    problems.extend(time_range_problems(filters.since, filters.until))
    if problems:
        raise ValidationFailed(problems)


def encode_cursor(last_id: int) -> str:
    """An opaque cursor for the page after ``last_id`` (the call log uses it too)."""
    return b64url_encode(f"{_CURSOR_PREFIX}{last_id}".encode())


def decode_cursor(cursor: str) -> int:
    """The last id a page returned; raises ValidationFailed for a cursor this API did not make."""
    try:
        text = b64url_decode(cursor).decode()
    except ValueError:  # binascii.Error, UnicodeDecodeError, and non-ASCII input
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
    conn: Connection,
    workspace_id: int,
    *,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
    filters: AuditFilters | None = None,
) -> AuditPage:
    """One page of the workspace's audit log; raises ValidationFailed for a bad limit,
    cursor or filter."""
    filters = filters or AuditFilters()
    _check(filters)
    before = page_start(limit, cursor)
    action = filters.action
    cur = await conn.execute(
        """SELECT id, at, actor, action, resource_type, resource_name, details
             FROM audit_log
            WHERE workspace_id = %(ws)s AND (%(before)s::bigint IS NULL OR id < %(before)s)
              AND (%(action)s::text IS NULL OR action = %(action)s
                   OR (%(family)s AND starts_with(action, %(action)s || '.')))
              AND (%(actor)s::text IS NULL OR strpos(lower(actor), lower(%(actor)s)) > 0)
              AND (%(resource)s::text IS NULL
                   OR resource_name = %(resource)s OR resource_type = %(resource)s)
              AND (%(since)s::timestamptz IS NULL OR at >= %(since)s)
              AND (%(until)s::timestamptz IS NULL OR at < %(until)s)
            ORDER BY id DESC
            LIMIT %(limit)s""",
        {
            "ws": workspace_id,
            "before": before,
            "action": action,
            "family": action is not None and "." not in action,
            "actor": filters.actor,
            "resource": filters.resource,
            "since": filters.since,
            "until": filters.until,
            "limit": limit + 1,
        },
    )
    rows = await cur.fetchall()
    items = [AuditEntry(**row) for row in rows[:limit]]
    return AuditPage(items=items, next_cursor=next_page(rows, limit))
