"""An approval row as both processes read it: the record, the id's shape, the page cursor.

The gateway's approval-key endpoints and the console's approvals page show the
same record and page through it the same way (newest first, keyset on
``(created_at, id)``), so the shape lives here, once
(docs/architecture.md, "Approval decisions").
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime
from typing import Any

import msgspec

from shared.crypto import b64url_decode, b64url_encode
from shared.engine.masking import Masker
from shared.principals import Requester, requester_of

STATUSES: tuple[str, ...] = (
    "pending",
    "approved",
    "denied",
    "expired",
    "executing",
    "completed",
    "failed",
)


# How far back an identical request counts as recent for the approver: a day, the
# default outcome retention, so a repeat the model makes after its outcome was
# delivered shows what a human decided for the same call.
RECENT_IDENTICAL_WINDOW_S = 86400


class RecentIdentical(msgspec.Struct, kw_only=True):
    """The latest earlier approval of the identical call (same agent, operation,
    version and canonical arguments) that finished in the day before this one was
    asked for (docs/architecture.md, "Approval decisions")."""

    id: str
    status: str  # denied, expired, completed or failed
    decided_at: datetime | None  # None: it expired unanswered
    decided_by: str | None
    note: str | None


class ApprovalRecord(msgspec.Struct, kw_only=True):
    """What ``GET .../approvals/{id}`` answers (docs/mcp-interface.md, "Human approval")."""

    id: str
    status: str
    tool: str
    version: int
    arguments: dict[str, Any]
    created_at: datetime
    expires_at: datetime  # when a pending row expires
    decided_at: datetime | None
    decided_by: str | None  # the approval key's prefix, or the console's admin
    note: str | None
    completed_at: datetime | None
    response_payload: Any | None  # masked when it was stored
    recent_identical: RecentIdentical | None  # the approver's warning of a repeat
    requester: Requester  # who asked (docs/mcp-interface.md, "Human approval"); never a token


RECORD_COLUMNS = """id, status, tool, version, arguments, created_at, expires_at, decided_at,
              decided_by, note, completed_at, response_payload, key_id, principal_issuer,
              principal_subject, principal_name, client_id"""
_RECENT = ("id", "status", "decided_at", "decided_by", "note")
# The columns ``record_joins`` adds beside RECORD_COLUMNS: the recent identical call's
# (renamed: no clash) and the prefix of the key that asked.
JOINED_COLUMNS = ", ".join(f"recent.recent_{name}" for name in _RECENT) + (
    ", requester.requester_key"
)


def record_joins(row: str) -> str:
    """``LEFT JOIN LATERAL`` onto the approvals row aliased ``row`` (which must expose
    agent_id, operation_id, version, arguments_hash, created_at, id and key_id) the
    identical call's latest earlier finished approval (index approvals_latest_per_call
    serves it) and the prefix of the key that asked. Each exposes only its renamed
    columns, so the unqualified RECORD_COLUMNS stay unambiguous."""
    selected = ", ".join(f"p.{name} AS recent_{name}" for name in _RECENT)
    return f"""LEFT JOIN LATERAL (
        SELECT {selected} FROM approvals p
         WHERE p.agent_id = {row}.agent_id AND p.operation_id = {row}.operation_id
           AND p.version = {row}.version AND p.arguments_hash = {row}.arguments_hash
           AND (p.created_at, p.id) < ({row}.created_at, {row}.id)
           AND p.status IN ('denied', 'expired', 'completed', 'failed')
           AND coalesce(p.completed_at, p.decided_at, p.expires_at)
               > {row}.created_at - make_interval(secs => {RECENT_IDENTICAL_WINDOW_S})
         ORDER BY p.created_at DESC, p.id DESC
         LIMIT 1) recent ON true
      LEFT JOIN LATERAL (
        SELECT k.prefix AS requester_key FROM api_keys k WHERE k.id = {row}.key_id
      ) requester ON true"""


def record_of(row: dict[str, Any]) -> ApprovalRecord:
    """The record of a row read with RECORD_COLUMNS and JOINED_COLUMNS."""
    recent = (
        None
        if row["recent_id"] is None
        else RecentIdentical(**{name: row[f"recent_{name}"] for name in _RECENT})
    )
    fields = {
        f: row[f]
        for f in ApprovalRecord.__struct_fields__
        if f not in ("recent_identical", "requester")
    }
    return ApprovalRecord(**fields, recent_identical=recent, requester=requester_of(row))


def shown(record: ApprovalRecord, masker: Masker) -> ApprovalRecord:
    """The record as the API and the console show it: the workspace's secrets masked in
    the arguments, the note and the payload (docs/architecture.md, "Approval decisions").
    Masked here, not when stored: an approved call runs with the real arguments."""
    if not masker:
        return record
    recent = record.recent_identical
    if recent is not None and recent.note is not None:
        recent = msgspec.structs.replace(recent, note=masker.text(recent.note))
    return msgspec.structs.replace(
        record,
        arguments=masker.value(record.arguments),
        note=None if record.note is None else masker.text(record.note),
        response_payload=masker.value(record.response_payload),
        recent_identical=recent,
    )


_ID_HEX_BYTES = 16
_APPROVAL_ID = re.compile(rf"approval_[0-9a-f]{{{2 * _ID_HEX_BYTES}}}")


def new_approval_id() -> str:
    return "approval_" + secrets.token_hex(_ID_HEX_BYTES)


def is_approval_id(text: str) -> bool:
    """Whether ``text`` has the shape ``new_approval_id`` makes; checked before any query,
    so a NUL or an overlong id never reaches the database."""
    return _APPROVAL_ID.fullmatch(text) is not None


class BadCursor(ValueError):
    pass


_BAD_CURSOR = "cursor is not one this endpoint returned"
_CURSOR_TEXT = re.compile(r"[A-Za-z0-9_-]{1,200}")  # unpadded base64url, with room to spare
_cursor_decoder = msgspec.json.Decoder(tuple[datetime, str])
_encoder = msgspec.json.Encoder()


def encode_cursor(created_at: datetime, approval_id: str) -> str:
    """The cursor of the page after the row ``(created_at, approval_id)``."""
    return b64url_encode(_encoder.encode((created_at, approval_id)))


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The (created_at, id) a cursor of ``encode_cursor`` holds; BadCursor for anything else
    (base64 decoding alone would skip characters outside its alphabet, a NUL say)."""
    if _CURSOR_TEXT.fullmatch(cursor) is None:
        raise BadCursor(_BAD_CURSOR)
    try:
        raw = b64url_decode(cursor)
        created_at, approval_id = _cursor_decoder.decode(raw)
    except (ValueError, msgspec.DecodeError) as exc:
        raise BadCursor(_BAD_CURSOR) from exc
    if created_at.tzinfo is None or not is_approval_id(approval_id):
        raise BadCursor(_BAD_CURSOR)
    return created_at, approval_id
