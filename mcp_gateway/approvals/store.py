"""All database access of the approval gate and the approval-key endpoints.

The rules live in the database (migrations/0004_safety_flows.sql): the
partial unique index ``approvals_one_active`` allows one active row (pending,
approved or executing) per agent, operation, version and arguments hash, and
the ``approvals_transition`` trigger skips any UPDATE that would move a row
along an edge outside the transition table (docs/architecture.md,
"Approval state machine"). So every statement here
says what it wants (``WHERE status = 'pending'``) and reads the outcome from
``RETURNING``: zero rows means the row was not in the state asked for.

Every statement the approval-key endpoints run names the agent whose key
is used, so one agent's key can neither read nor change (expire included)
another agent's rows; ids and cursors are checked for shape before any query.

A finished row's outcome is handed to the first repeat of its call
(``claim_outcome``; docs/architecture.md, "Approval outcomes"): the latest row
of the call, if finished, not yet delivered and finished less than
``CRANK_APPROVAL_OUTCOME_RETENTION_S`` ago, gets ``delivered_at`` in one
statement, so of two concurrent repeats on any replicas exactly one gets it.

A pending row past ``expires_at`` is expired by whoever meets it first: the
sweep (``expire_overdue``), a list or read (``expire_overdue_for_agent``), a
decision, or a repeat tools/call of the same arguments.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import msgspec
from psycopg.types.json import Jsonb

from shared.crypto import b64url_decode, b64url_encode
from shared.db import Connection
from shared.engine.argument_limits import child_path

Status = Literal["pending", "approved", "denied", "expired", "executing", "completed", "failed"]
STATUSES: frozenset[str] = frozenset(
    ("pending", "approved", "denied", "expired", "executing", "completed", "failed")
)
_ACTIVE = "('pending', 'approved', 'executing')"  # the index predicate, verbatim
FINISHED = "('denied', 'expired', 'completed', 'failed')"
# When a finished row finished: completed_at (completed, failed), decided_at (denied),
# expires_at (expired); the expression of the index approvals_finished.
FINISHED_AT = "coalesce(completed_at, decided_at, expires_at)"
DEFAULT_PAGE = 50
MAX_PAGE = 200
SWEEP_BATCH = 1000


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
    decided_by: str | None  # the approval key's prefix
    note: str | None
    completed_at: datetime | None
    response_payload: Any | None


class ApprovalPage(msgspec.Struct, kw_only=True):
    items: list[ApprovalRecord]
    next_cursor: str | None


_RECORD = """id, status, tool, version, arguments, created_at, expires_at, decided_at,
              decided_by, note, completed_at, response_payload"""
_IDENTITY = "agent_id = %s AND operation_id = %s AND version = %s AND arguments_hash = %s"


def nul_path(arguments: dict[str, Any]) -> str | None:
    """The JSON path of the first string or key holding NUL (U+0000), which a jsonb
    column cannot store; None when there is none."""
    stack: list[tuple[Any, str]] = [(arguments, "$")]
    while stack:
        node, where = stack.pop()
        if isinstance(node, str):
            if "\x00" in node:
                return where
        elif isinstance(node, dict):
            for key, item in node.items():
                child = child_path(where, key)
                if "\x00" in key:
                    return child
                stack.append((item, child))
        elif isinstance(node, list):
            stack.extend((item, f"{where}[{n}]") for n, item in enumerate(node))
    return None


def _record(row: dict[str, Any]) -> ApprovalRecord:
    return ApprovalRecord(**{f: row[f] for f in ApprovalRecord.__struct_fields__})


_ID_HEX_BYTES = 16
_APPROVAL_ID = re.compile(rf"approval_[0-9a-f]{{{2 * _ID_HEX_BYTES}}}")


def new_approval_id() -> str:
    return "approval_" + secrets.token_hex(_ID_HEX_BYTES)


def is_approval_id(text: str) -> bool:
    """Whether ``text`` has the shape ``new_approval_id`` makes; checked before any query,
    so a NUL or an overlong id never reaches the database."""
    return _APPROVAL_ID.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class NewApproval:
    workspace_id: int
    agent_id: int
    operation_id: int
    key_id: int
    tool: str
    version: int
    arguments: dict[str, Any]
    arguments_hash: bytes
    request: dict[str, Any]  # the resolved request, secrets masked
    ttl_s: int
    max_attempts: int


async def insert_unless_active(conn: Connection, new: NewApproval) -> str | None:
    """The id of a new pending row, or None when an active row for the same
    call exists (the unique index decides, also between replicas)."""
    cur = await conn.execute(
        f"""INSERT INTO approvals (id, workspace_id, agent_id, operation_id, key_id, tool, version,
                                  arguments, arguments_hash, request, expires_at, max_attempts)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
                    now() + make_interval(secs => %s), %s)
            ON CONFLICT (agent_id, operation_id, version, arguments_hash)
                WHERE status IN {_ACTIVE} DO NOTHING
            RETURNING id""",
        (
            new_approval_id(),
            new.workspace_id,
            new.agent_id,
            new.operation_id,
            new.key_id,
            new.tool,
            new.version,
            Jsonb(new.arguments),
            new.arguments_hash,
            Jsonb(new.request),
            new.ttl_s,
            new.max_attempts,
        ),
    )
    row = await cur.fetchone()
    return None if row is None else str(row["id"])


async def find_active(conn: Connection, new: NewApproval) -> tuple[str, bool] | None:
    """(id, overdue) of the active row for the same call; overdue: pending past expires_at."""
    cur = await conn.execute(
        f"""SELECT id, status = 'pending' AND expires_at <= now() AS overdue FROM approvals
             WHERE {_IDENTITY} AND status IN {_ACTIVE}""",
        (new.agent_id, new.operation_id, new.version, new.arguments_hash),
    )
    row = await cur.fetchone()
    return None if row is None else (str(row["id"]), bool(row["overdue"]))


class FinishedApproval(msgspec.Struct, frozen=True, kw_only=True):
    """A finished approval whose outcome this call now delivers."""

    id: str
    status: str  # denied, expired, completed or failed
    note: str | None  # the approver's
    response_payload: Any | None  # completed: the selected result; failed: the error
    result_truncated: bool  # completed: the result was cut to fit


async def claim_outcome(
    conn: Connection, new: NewApproval, retention_s: int
) -> FinishedApproval | None:
    """The outcome of the call's latest approval, marked delivered in the same statement;
    None when that row is active, delivered already, too old, or there is none.

    Two concurrent claims pick the same row; the second waits for the first's row
    lock, then finds ``delivered_at`` set and changes nothing."""
    cur = await conn.execute(
        f"""UPDATE approvals SET delivered_at = now()
             WHERE id = (SELECT id FROM approvals WHERE {_IDENTITY}
                          ORDER BY created_at DESC, id DESC LIMIT 1)
               AND status IN {FINISHED} AND delivered_at IS NULL
               AND {FINISHED_AT} > now() - make_interval(secs => %s)
            RETURNING id, status, note, response_payload, result_truncated""",
        (new.agent_id, new.operation_id, new.version, new.arguments_hash, retention_s),
    )
    row = await cur.fetchone()
    return None if row is None else FinishedApproval(**row)


async def expire(conn: Connection, agent_id: int, approval_id: str) -> None:
    """pending → expired for one row of this agent, if it is pending and past its time."""
    await conn.execute(
        """UPDATE approvals SET status = 'expired'
            WHERE id = %s AND agent_id = %s AND status = 'pending' AND expires_at <= now()""",
        (approval_id, agent_id),
    )


async def expire_overdue(conn: Connection) -> int:
    """The sweep: every pending row past its time becomes expired (in batches)."""
    total = 0
    while True:
        cur = await conn.execute(
            f"""UPDATE approvals SET status = 'expired'
                 WHERE id IN (SELECT id FROM approvals
                               WHERE status = 'pending' AND expires_at <= now()
                               ORDER BY expires_at LIMIT {SWEEP_BATCH}
                               FOR UPDATE SKIP LOCKED)
                   AND status = 'pending'"""
        )
        total += cur.rowcount
        if cur.rowcount < SWEEP_BATCH:
            return total


async def expire_overdue_for_agent(conn: Connection, agent_id: int) -> None:
    await conn.execute(
        """UPDATE approvals SET status = 'expired'
            WHERE agent_id = %s AND status = 'pending' AND expires_at <= now()""",
        (agent_id,),
    )


async def get(conn: Connection, agent_id: int, approval_id: str) -> ApprovalRecord | None:
    """One row of this agent; another agent's row is as unknown as a missing one."""
    cur = await conn.execute(
        f"SELECT {_RECORD} FROM approvals WHERE id = %s AND agent_id = %s",
        (approval_id, agent_id),
    )
    row = await cur.fetchone()
    return None if row is None else _record(row)


class BadCursor(ValueError):
    pass


_BAD_CURSOR = "cursor is not one this endpoint returned"
_CURSOR_TEXT = re.compile(r"[A-Za-z0-9_-]{1,200}")  # unpadded base64url, with room to spare


_cursor_decoder = msgspec.json.Decoder(tuple[datetime, str])
_encoder = msgspec.json.Encoder()


def encode_cursor(record: ApprovalRecord) -> str:
    raw = _encoder.encode((record.created_at, record.id))
    return b64url_encode(raw)


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


async def list_page(
    conn: Connection, agent_id: int, status: str | None, cursor: str | None, limit: int
) -> ApprovalPage:
    """Newest first; keyset paging on (created_at, id)."""
    after = decode_cursor(cursor) if cursor else None
    cur = await conn.execute(
        f"""SELECT {_RECORD} FROM approvals
             WHERE agent_id = %(agent)s
               AND (%(status)s::text IS NULL OR status = %(status)s)
               AND (%(at)s::timestamptz IS NULL OR (created_at, id) < (%(at)s, %(id)s))
             ORDER BY created_at DESC, id DESC
             LIMIT %(limit)s""",
        {
            "agent": agent_id,
            "status": status,
            "at": after[0] if after else None,
            "id": after[1] if after else None,
            "limit": limit + 1,
        },
    )
    records = [_record(row) for row in await cur.fetchall()]
    more = len(records) > limit
    records = records[:limit]
    return ApprovalPage(items=records, next_cursor=encode_cursor(records[-1]) if more else None)


@dataclass(frozen=True, slots=True)
class Decision:
    approval_id: str
    agent_id: int
    agent: str  # workspace/agent, for the audit details
    status: Literal["approved", "denied"]
    decided_by: str  # the approval key's prefix; CANCELLED_BY for a client's tasks/cancel
    note: str | None
    actor: str | None = None  # the audit row's actor; default: the approval key


# decided_by of a pending row the client cancelled through tasks/cancel: a denial no
# approval key made (docs/architecture.md, "Tasks"); no key prefix holds a slash.
CANCELLED_BY = "mcp-client/tasks-cancel"


async def decide(conn: Connection, decision: Decision) -> ApprovalRecord | None:
    """pending → approved | denied and its audit row, in one statement; None
    when the row is not pending (or not this agent's, or past its time). No
    NOTIFY here: the caller wakes the workers once the decision has committed
    (mcp_gateway.approvals.wakeups says why)."""
    cur = await conn.execute(
        f"""WITH decided AS (
                UPDATE approvals
                   SET status = %(status)s, decided_at = now(), decided_by = %(by)s, note = %(note)s
                 WHERE id = %(id)s AND agent_id = %(agent_id)s
                   AND status = 'pending' AND expires_at > now()
                RETURNING workspace_id, {_RECORD}
            ), audited AS (
                INSERT INTO audit_log
                       (workspace_id, actor, action, resource_type, resource_name, details)
                SELECT workspace_id, %(actor)s, %(action)s, 'approval', id,
                       jsonb_build_object('note', note, 'tool', tool, 'version', version,
                                          'agent', %(agent)s::text)
                  FROM decided
            )
            SELECT {_RECORD} FROM decided""",
        {
            "status": decision.status,
            "by": decision.decided_by,
            "note": decision.note,
            "id": decision.approval_id,
            "agent_id": decision.agent_id,
            "agent": decision.agent,
            "actor": decision.actor or f"approval key {decision.decided_by}…",
            "action": f"approval.{decision.status}",
        },
    )
    row = await cur.fetchone()
    return None if row is None else _record(row)


class TaskRow(msgspec.Struct, frozen=True, kw_only=True):
    """An approval as its task shows it (mcp_gateway.approvals.tasks)."""

    id: str
    status: str
    decided_by: str | None
    note: str | None
    response_payload: Any | None
    result_truncated: bool
    created_at: datetime
    updated_at: datetime  # the latest of created, decided, completed (or expired) times
    expires_at: datetime  # when a pending row expires
    finished_at: datetime | None  # FINISHED_AT for a finished row, else None
    overdue: bool  # pending past expires_at
    retained: bool  # finished within the outcome retention, or still active


async def task_row(
    conn: Connection, agent_id: int, approval_id: str, retention_s: int, *, deliver: bool
) -> TaskRow | None:
    """One row of this agent as a task; with ``deliver``, a finished row not yet delivered
    is marked delivered first (its task hands the outcome over, docs/architecture.md, "Tasks")."""
    if deliver:
        await conn.execute(
            f"""UPDATE approvals SET delivered_at = now()
                 WHERE id = %s AND agent_id = %s AND status IN {FINISHED}
                   AND delivered_at IS NULL
                   AND {FINISHED_AT} > now() - make_interval(secs => %s)""",
            (approval_id, agent_id, retention_s),
        )
    cur = await conn.execute(
        f"""SELECT id, status, decided_by, note, response_payload, result_truncated, created_at,
                   greatest(created_at, decided_at, completed_at,
                            CASE WHEN status = 'expired' THEN expires_at END) AS updated_at,
                   expires_at,
                   CASE WHEN status IN {FINISHED} THEN {FINISHED_AT} END AS finished_at,
                   status = 'pending' AND expires_at <= now() AS overdue,
                   status NOT IN {FINISHED}
                     OR {FINISHED_AT} > now() - make_interval(secs => %s) AS retained
              FROM approvals WHERE id = %s AND agent_id = %s""",
        (retention_s, approval_id, agent_id),
    )
    row = await cur.fetchone()
    return None if row is None else TaskRow(**row)
