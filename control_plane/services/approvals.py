"""A workspace's approvals as the console shows them, and an owner's decision.

The gateways write the rows (docs/architecture.md, "The path of an
approval"); this reads them across all of a workspace's agents, newest first,
keyset paging on ``(created_at, id)`` with the approval-key endpoints' cursor.
A decision runs the shared statement (``shared.approval_decisions``), so an
owner's decision obeys exactly the rules an approval key's does and is audited
by the same statement (docs/architecture.md, "Approval decisions"). A record
is shown, and a note stored, with the workspace's secrets masked
(``masker_of``), as the gateway's endpoints and webhooks do.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

import msgspec

from control_plane.auth import Principal, Workspace
from control_plane.errors import Conflict, NotFound, ValidationFailed
from shared.approval_decisions import MAX_NOTE_CHARS, Decision, decide_or_status, notify_approved
from shared.approval_records import (
    JOINED_COLUMNS,
    RECORD_COLUMNS,
    STATUSES,
    ApprovalRecord,
    BadCursor,
    decode_cursor,
    encode_cursor,
    is_approval_id,
    record_joins,
    record_of,
    shown,
)
from shared.crypto import SecretBox
from shared.db import Connection
from shared.engine.masking import Masker, workspace_masker
from shared.engine.spec_validation import SLUG, TOOL_NAME, FieldError
from shared.principals import Requester, requester_of
from shared.secrets import load_secrets

DEFAULT_LIMIT = 50
MAX_LIMIT = 200


class ApprovalFilters(msgspec.Struct, kw_only=True):
    status: str | None = None
    agent: str | None = None  # slug
    tool: str | None = None


class ApprovalSummary(msgspec.Struct, kw_only=True):
    id: str
    status: str
    agent: str
    tool: str
    version: int
    created_at: datetime
    expires_at: datetime
    decided_at: datetime | None
    decided_by: str | None
    overdue: bool  # pending past its time: the gateways' sweep expires it shortly
    requester: Requester  # who asked: a person or a key (never a token)


class ApprovalList(msgspec.Struct, kw_only=True):
    items: list[ApprovalSummary]
    next_cursor: str | None


class ApprovalDetail(msgspec.Struct, kw_only=True):
    record: ApprovalRecord
    agent_id: int
    agent: str
    overdue: bool


def _check(filters: ApprovalFilters, limit: int) -> None:
    problems: list[FieldError] = []
    if not 1 <= limit <= MAX_LIMIT:
        problems.append(FieldError("limit", f"must be between 1 and {MAX_LIMIT}"))
    if filters.status is not None and filters.status not in STATUSES:
        problems.append(FieldError("status", f"must be one of {', '.join(STATUSES)}"))
    if filters.agent is not None and not SLUG.fullmatch(filters.agent):
        problems.append(FieldError("agent", "not an agent slug"))
    if filters.tool is not None and not TOOL_NAME.fullmatch(filters.tool):
        problems.append(FieldError("tool", "not a tool name"))
    if problems:
        raise ValidationFailed(problems)


async def list_approvals(
    conn: Connection,
    workspace_id: int,
    filters: ApprovalFilters,
    *,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
) -> ApprovalList:
    """One page of the workspace's approvals; ValidationFailed for a bad filter or cursor."""
    _check(filters, limit)
    try:
        after = decode_cursor(cursor) if cursor else None
    except BadCursor:
        raise ValidationFailed([FieldError("cursor", "not a cursor this page returned")]) from None
    cur = await conn.execute(
        """SELECT p.id, p.status, a.slug AS agent, p.tool, p.version, p.created_at,
                  p.expires_at, p.decided_at, p.decided_by,
                  p.status = 'pending' AND p.expires_at <= now() AS overdue,
                  p.key_id, k.prefix AS requester_key, p.principal_issuer,
                  p.principal_subject, p.principal_name, p.client_id
             FROM approvals p JOIN agents a ON a.id = p.agent_id
             LEFT JOIN api_keys k ON k.id = p.key_id
            WHERE p.workspace_id = %(ws)s
              AND (%(status)s::text IS NULL OR p.status = %(status)s)
              AND (%(agent)s::text IS NULL OR a.slug = %(agent)s)
              AND (%(tool)s::text IS NULL OR p.tool = %(tool)s)
              AND (%(at)s::timestamptz IS NULL OR (p.created_at, p.id) < (%(at)s, %(id)s))
            ORDER BY p.created_at DESC, p.id DESC
            LIMIT %(limit)s""",
        {
            "ws": workspace_id,
            "status": filters.status,
            "agent": filters.agent,
            "tool": filters.tool,
            "at": after[0] if after else None,
            "id": after[1] if after else None,
            "limit": limit + 1,
        },
    )
    rows = await cur.fetchall()
    items = [_summary(row) for row in rows[:limit]]
    last = items[-1] if len(rows) > limit else None
    return ApprovalList(
        items=items, next_cursor=encode_cursor(last.created_at, last.id) if last else None
    )


def _summary(row: dict[str, Any]) -> ApprovalSummary:
    fields = {f: row[f] for f in ApprovalSummary.__struct_fields__ if f != "requester"}
    return ApprovalSummary(**fields, requester=requester_of(row))


async def masker_of(conn: Connection, box: SecretBox, workspace_id: int) -> Masker:
    """The masker of the workspace's current secrets."""
    return workspace_masker(await load_secrets(conn, box, workspace_id))


async def get_approval(
    conn: Connection, workspace_id: int, approval_id: str, masker: Masker
) -> ApprovalDetail:
    """One approval of the workspace, masked with ``masker``; NotFound for any other id."""
    if not is_approval_id(approval_id):
        raise NotFound(f"no approval {approval_id!r} in this workspace")
    cur = await conn.execute(
        f"""SELECT r.*, a.slug AS agent
              FROM (SELECT {RECORD_COLUMNS}, {JOINED_COLUMNS}, agent_id,
                           status = 'pending' AND expires_at <= now() AS overdue
                      FROM approvals x {record_joins("x")}
                     WHERE id = %s AND workspace_id = %s) r
              JOIN agents a ON a.id = r.agent_id""",
        (approval_id, workspace_id),
    )
    row = await cur.fetchone()
    if row is None:
        raise NotFound(f"no approval {approval_id!r} in this workspace")
    return ApprovalDetail(
        record=shown(record_of(row), masker),
        agent_id=row["agent_id"],
        agent=row["agent"],
        overdue=row["overdue"],
    )


def console_decider(principal: Principal) -> str:
    """``decided_by`` of a console decision: the admin, never the token itself."""
    return f"console:{principal.actor}"


class NotPending(Conflict):
    """409: the approval is no longer pending; ``status`` says what it is."""

    code = "not_pending"

    def __init__(self, approval_id: str, status: str) -> None:
        super().__init__(f"approval {approval_id} is {status}, not pending; nothing was changed")
        self.status = status


def check_note(note: str) -> str | None:
    """The note as stored (None when blank); ValidationFailed when it cannot be."""
    if len(note) > MAX_NOTE_CHARS:
        raise ValidationFailed([FieldError("note", f"at most {MAX_NOTE_CHARS} characters")])
    if "\x00" in note:
        raise ValidationFailed([FieldError("note", "must not contain NUL characters")])
    return note.strip() or None


async def decide_approval(
    conn: Connection,
    ws: Workspace,
    principal: Principal,
    approval_id: str,
    status: Literal["approved", "denied"],
    note: str,
    masker: Masker,
) -> ApprovalRecord:
    """An owner's decision, audited, its note masked with ``masker`` (the record
    answered too); NotFound, NotPending (409) or ValidationFailed."""
    stored_note = check_note(note)
    if stored_note is not None:
        stored_note = masker.text(stored_note)
    found = await get_approval(conn, ws.id, approval_id, masker)
    decision = Decision(
        approval_id,
        found.agent_id,
        f"{ws.slug}/{found.agent}",
        status,
        console_decider(principal),
        stored_note,
        actor=principal.actor,
    )
    outcome = await decide_or_status(conn, decision)
    if outcome is None:  # deleted with its agent meanwhile
        raise NotFound(f"no approval {approval_id!r} in this workspace")
    if isinstance(outcome, str):
        raise NotPending(approval_id, outcome)
    if status == "approved":
        await notify_approved(conn)  # delivered when this transaction commits
    return shown(outcome, masker)
