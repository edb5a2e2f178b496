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

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import msgspec
import psycopg
from psycopg.types.json import Jsonb

from mcp_gateway.upkeep.retention import Rule

# The record, its cursor and the decision are shared with the console
# (docs/architecture.md, "Approval decisions"); re-exported for the gateway's modules.
from shared.approval_decisions import Decision as Decision
from shared.approval_decisions import decide as decide
from shared.approval_decisions import decide_or_status as decide_or_status
from shared.approval_decisions import expire as expire
from shared.approval_records import RECORD_COLUMNS, record_of
from shared.approval_records import STATUSES as STATUSES
from shared.approval_records import ApprovalRecord as ApprovalRecord
from shared.approval_records import BadCursor as BadCursor
from shared.approval_records import decode_cursor as decode_cursor
from shared.approval_records import encode_cursor as encode_cursor
from shared.approval_records import is_approval_id as is_approval_id
from shared.approval_records import new_approval_id as new_approval_id
from shared.db import Connection
from shared.engine.argument_limits import child_path
from shared.settings import Settings

_ACTIVE = "('pending', 'approved', 'executing')"  # the index predicate, verbatim
FINISHED = "('denied', 'expired', 'completed', 'failed')"
# When a finished row finished: completed_at (completed, failed), decided_at (denied),
# expires_at (expired); the expression of the index approvals_finished.
FINISHED_AT = "coalesce(completed_at, decided_at, expires_at)"
DEFAULT_PAGE = 50
MAX_PAGE = 200
SWEEP_BATCH = 1000


class ApprovalPage(msgspec.Struct, kw_only=True):
    items: list[ApprovalRecord]
    next_cursor: str | None


_RECORD = RECORD_COLUMNS
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


async def insert_unless_active(conn: Connection, new: NewApproval, retention_s: int) -> str | None:
    """The id of a new pending row, or None when an active row for the same
    call exists (the unique index decides, also between replicas), or when the
    call's previous approval finished since the caller's ``claim_outcome`` and
    its outcome is still to be delivered: the insert is rolled back, and the
    caller's next claim delivers that outcome (docs/architecture.md, "Approval
    outcomes"). Without that check the repeat would ask a human again for a
    call that has just run, and the run's outcome would never be delivered.

    The check is a second statement in the insert's transaction: an insert
    that went through because the active row finished waited for (or came
    after) that commit, so the second statement's snapshot sees it finished."""
    async with conn.transaction() as tx:
        approval_id = await _insert_pending(conn, new)
        if approval_id is None or not await _outcome_pending(conn, new, approval_id, retention_s):
            return approval_id
        raise psycopg.Rollback(tx)
    return None


async def _insert_pending(conn: Connection, new: NewApproval) -> str | None:
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


async def _outcome_pending(
    conn: Connection, new: NewApproval, inserted: str, retention_s: int
) -> bool:
    """Whether the call's latest row before ``inserted`` holds an outcome ``claim_outcome``
    would deliver (the same conditions)."""
    cur = await conn.execute(
        f"""SELECT EXISTS (
                SELECT FROM approvals
                 WHERE id = (SELECT id FROM approvals WHERE {_IDENTITY} AND id <> %s
                              ORDER BY created_at DESC, id DESC LIMIT 1)
                   AND status IN {FINISHED} AND delivered_at IS NULL
                   AND {FINISHED_AT} > now() - make_interval(secs => %s)) AS pending""",
        (new.agent_id, new.operation_id, new.version, new.arguments_hash, inserted, retention_s),
    )
    row = await cur.fetchone()
    return bool(row is not None and row["pending"])


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
    status: Literal["completed", "failed", "denied", "expired"]
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
    return None if row is None else record_of(row)


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
    records = [record_of(row) for row in await cur.fetchall()]
    more = len(records) > limit
    records = records[:limit]
    return ApprovalPage(
        items=records,
        next_cursor=encode_cursor(records[-1].created_at, records[-1].id) if more else None,
    )


# decided_by of a pending row the client cancelled through tasks/cancel: a denial no
# approval key made (docs/architecture.md, "Tasks"); no key prefix holds a slash.
CANCELLED_BY = "mcp-client/tasks-cancel"


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


def retention_rule(settings: Settings) -> Rule:
    """Finished approvals past ``CRANK_APPROVALS_RETENTION_DAYS`` (mcp_gateway.upkeep.retention),
    but an outcome a repeat call may still get stays (docs/architecture.md, "Approval
    outcomes"); the period is a validated integer setting."""
    return Rule(
        "approvals",
        f"status IN {FINISHED} AND {FINISHED_AT} < now() - make_interval(days => %s)"
        f" AND (delivered_at IS NOT NULL OR {FINISHED_AT}"
        f" < now() - make_interval(secs => {int(settings.approval_outcome_retention_s)}))",
        settings.approvals_retention_days,
    )
