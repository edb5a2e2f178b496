"""Every statement the gateway runs on ``approvals`` (decisions: shared.approval_decisions).

For the gate, the approval-key endpoints, tasks, the waits' poll, the backlog gauges,
retention and the worker's leases. The database enforces the rules, so each statement
says what it wants and reads the outcome from ``RETURNING`` (docs/architecture.md,
"Approval state machine").
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal

import msgspec
import psycopg
from psycopg.types.json import Jsonb

from mcp_gateway.upkeep.metrics import count_lease_expiries
from mcp_gateway.upkeep.retention import Rule

# The record, its cursor and the decision are shared with the console
# (docs/architecture.md, "Approval decisions"); re-exported for the gateway's modules.
from shared.approval_decisions import CHANNEL as CHANNEL  # the workers' wake-up
from shared.approval_decisions import Decision as Decision
from shared.approval_decisions import decide as decide
from shared.approval_decisions import decide_or_status as decide_or_status
from shared.approval_decisions import expire as expire
from shared.approval_records import JOINED_COLUMNS, RECORD_COLUMNS, record_joins, record_of
from shared.approval_records import STATUSES as STATUSES
from shared.approval_records import ApprovalRecord as ApprovalRecord
from shared.approval_records import BadCursor as BadCursor
from shared.approval_records import decode_cursor as decode_cursor
from shared.approval_records import encode_cursor as encode_cursor
from shared.approval_records import is_approval_id as is_approval_id
from shared.approval_records import new_approval_id as new_approval_id
from shared.db import Connection
from shared.engine.argument_limits import child_path
from shared.principals import PrincipalRecord, principal_columns, principal_of_row
from shared.settings import Settings

_ACTIVE = "('pending', 'approved', 'executing')"  # the index predicate, verbatim
FINISHED = "('denied', 'expired', 'completed', 'failed')"
# When a finished row finished: completed_at (completed, failed), decided_at (denied),
# expires_at (expired); the expression of the index approvals_finished.
FINISHED_AT = "coalesce(completed_at, decided_at, expires_at)"
# The ids of ``%s`` that are finished (the approval waits' poll, approvals.waiters).
FINISHED_IDS_SQL = f"SELECT id FROM approvals WHERE id = ANY(%s) AND status IN {FINISHED}"
# The work waiting, read when /metrics is scraped (upkeep.backlog): select-list columns.
BACKLOG_COLUMNS = """
       (SELECT count(*) FROM approvals WHERE status = 'pending') AS pending,
       (SELECT count(*) FROM approvals WHERE status = 'approved') AS approved,
       (SELECT count(*) FROM approvals WHERE status = 'executing') AS executing,
       (SELECT coalesce(extract(epoch FROM now() - min(created_at)), 0)::float8
          FROM approvals WHERE status = 'pending') AS oldest_pending_s"""
DEFAULT_PAGE = 50
MAX_PAGE = 200
SWEEP_BATCH = 1000


class ApprovalPage(msgspec.Struct, kw_only=True):
    items: list[ApprovalRecord]
    next_cursor: str | None


_RECORD = f"{RECORD_COLUMNS}, {JOINED_COLUMNS}"  # read with record_joins("r")
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
    key_id: int | None  # None: a person signed in with an identity provider asked
    tool: str
    version: int
    arguments: dict[str, Any]
    arguments_hash: bytes
    request: dict[str, Any]  # the resolved request, secrets masked
    ttl_s: int
    max_attempts: int
    person: PrincipalRecord | None = None  # who signed in, when key_id is None


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
                                  arguments, arguments_hash, request, expires_at, max_attempts,
                                  principal_issuer, principal_subject, principal_name, client_id)
            VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
                    now() + make_interval(secs => %s), %s, %s, %s, %s, %s)
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
            *principal_columns(new.person),
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
        f"""SELECT {_RECORD} FROM approvals r {record_joins("r")}
             WHERE id = %s AND agent_id = %s""",
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
        f"""SELECT {_RECORD} FROM approvals r {record_joins("r")}
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


# -- the approval worker: claim, renew, finish, release ----------------------
#
# A claim is one statement (docs/architecture.md, "SQL patterns"): a ``MATERIALIZED``
# CTE picks claimable rows ``FOR UPDATE SKIP LOCKED``, so concurrent claimers on any
# replica never wait on each other and never take the same row, and the ``UPDATE``
# moves them in the same breath. Claimable: ``approved``, or ``executing`` with an
# expired lease; a row whose attempts are spent fails in that same statement. The
# lease is ``timeout_ms * (retries + 1) + margin`` of the row's operation version.
# Renew, finish and release are fenced on ``(id, attempt, status = 'executing',
# lease_owner)``: a worker whose row was re-claimed changes nothing, and learns so
# from the row count (docs/architecture.md, "Leases and fencing").

Finished = Literal["completed", "failed"]


@dataclass(frozen=True, slots=True)
class Claimed:
    """One row this worker now runs, as the claim returned it."""

    id: str
    attempt: int  # the fence: this claim's attempt number
    max_attempts: int
    workspace_id: int
    agent_id: int
    key_id: int | None  # the agent key that asked for the approval
    person: PrincipalRecord | None  # or the person who did (the run's call log row names them)
    workspace: str  # slugs, for the call's metric label
    agent: str
    operation_id: int
    tool: str
    version: int
    arguments: dict[str, Any]  # the validated arguments of the original call
    request: dict[str, Any]  # the request as built then, secrets masked
    lease_s: float


# ORDER BY the claimable index's key: approved rows (no lease) first, then the
# longest-expired leases. The CTE reads approvals alone: joined before the
# LIMIT, every claimable row's spec went through the sort (LockRows keeps it
# from being a top-N sort), which spilled to disk once a backlog of thousands
# of rows outran the table's statistics; the lease is computed for the claimed
# rows only (docs/architecture.md, "Leases and fencing").
_CLAIM_SQL = """
WITH candidate AS MATERIALIZED (
    SELECT a.id, a.status = 'executing' AND a.attempt >= a.max_attempts AS exhausted,
           a.status = 'executing' AS lease_expired
      FROM approvals a
     WHERE a.status = 'approved'
        OR (a.status = 'executing' AND a.lease_expires_at < now())
     ORDER BY a.lease_expires_at NULLS FIRST
     LIMIT %(limit)s
       FOR UPDATE SKIP LOCKED
)
UPDATE approvals a
   SET status = CASE WHEN c.exhausted THEN 'failed' ELSE 'executing' END,
       attempt = CASE WHEN c.exhausted THEN a.attempt ELSE a.attempt + 1 END,
       lease_owner = CASE WHEN c.exhausted THEN a.lease_owner ELSE %(owner)s END,
       lease_expires_at = CASE WHEN c.exhausted THEN NULL
                               ELSE now() + make_interval(secs => l.lease_s) END,
       response_payload = CASE WHEN c.exhausted THEN %(exhausted)s ELSE a.response_payload END,
       completed_at = CASE WHEN c.exhausted THEN now() ELSE a.completed_at END
  FROM candidate c, operation_versions v,
       LATERAL (SELECT (coalesce((v.spec #>> '{execution_config,timeout_ms}')::float8, 10000)
                        / 1000
                        * (coalesce((v.spec #>> '{execution_config,retries}')::int, 2) + 1)
                        + %(margin_s)s)::float8 AS lease_s) l
 WHERE a.id = c.id AND v.operation_id = a.operation_id AND v.version = a.version
RETURNING a.id, a.status, a.attempt, a.max_attempts, a.workspace_id, a.agent_id, a.key_id,
          a.principal_issuer, a.principal_subject, a.principal_name, a.client_id,
          (SELECT slug FROM workspaces WHERE id = a.workspace_id) AS workspace,
          (SELECT slug FROM agents WHERE id = a.agent_id) AS agent,
          a.operation_id, a.tool, a.version, a.arguments, a.request, l.lease_s, c.lease_expired
"""

_FENCE = (
    "id = %(id)s AND attempt = %(attempt)s AND status = 'executing' AND lease_owner = %(owner)s"
)

_RENEW_SQL = f"""
UPDATE approvals SET lease_expires_at = now() + make_interval(secs => %(lease_s)s)
 WHERE {_FENCE}
"""

# lease_owner stays on a finished row: it says which process ran the call. One
# statement finishes a batch (docs/architecture.md, "Leases and fencing"), each
# row fenced on its own (id, attempt) and the owner; RETURNING names the rows
# this claim still held.
_FINISH_SQL = """
UPDATE approvals a
   SET status = f.status, response_payload = f.payload, completed_at = now(),
       lease_expires_at = NULL, result_truncated = f.truncated
  FROM unnest(%(ids)s::text[], %(attempts)s::int[], %(statuses)s::text[],
              %(payloads)s::jsonb[], %(truncated)s::bool[])
       AS f(id, attempt, status, payload, truncated)
 WHERE a.id = f.id AND a.attempt = f.attempt AND a.status = 'executing'
   AND a.lease_owner = %(owner)s
RETURNING a.id
"""

# The attempt stays: the request may already have reached the upstream. A row
# released on its last attempt fails as exhausted instead of going back.
_RELEASE_SQL = f"""
WITH released AS (
    UPDATE approvals
       SET status = CASE WHEN attempt >= max_attempts THEN 'failed' ELSE 'approved' END,
           lease_owner = CASE WHEN attempt >= max_attempts THEN lease_owner END,
           lease_expires_at = NULL,
           response_payload = CASE WHEN attempt >= max_attempts
                                   THEN %(exhausted)s ELSE response_payload END,
           completed_at = CASE WHEN attempt >= max_attempts THEN now() ELSE completed_at END
     WHERE {_FENCE}
    RETURNING id, status
)
SELECT status, CASE WHEN status = 'approved' THEN pg_notify('{CHANNEL}', id) END FROM released
"""

_SPEC_SQL = "SELECT spec FROM operation_versions WHERE operation_id = %s AND version = %s"


def _fence(row: Claimed, owner: str) -> dict[str, Any]:
    return {"id": row.id, "attempt": row.attempt, "owner": owner}


async def claim(
    conn: Connection, *, owner: str, limit: int, margin_s: float, exhausted: dict[str, Any]
) -> tuple[list[Claimed], list[Claimed]]:
    """(rows to run, rows failed as exhausted); at most ``limit`` rows in all."""
    cur = await conn.execute(
        _CLAIM_SQL,
        {"owner": owner, "limit": limit, "margin_s": margin_s, "exhausted": Jsonb(exhausted)},
    )
    running: list[Claimed] = []
    failed: list[Claimed] = []
    rows = await cur.fetchall()
    count_lease_expiries("approvals", sum(r["lease_expired"] for r in rows))
    for r in rows:
        row = Claimed(
            id=r["id"],
            attempt=r["attempt"],
            max_attempts=r["max_attempts"],
            workspace_id=r["workspace_id"],
            agent_id=r["agent_id"],
            key_id=r["key_id"],
            person=principal_of_row(r),
            workspace=r["workspace"],
            agent=r["agent"],
            operation_id=r["operation_id"],
            tool=r["tool"],
            version=r["version"],
            arguments=r["arguments"],
            request=r["request"],
            lease_s=float(r["lease_s"]),
        )
        (running if r["status"] == "executing" else failed).append(row)
    return running, failed


async def renew(conn: Connection, row: Claimed, owner: str) -> bool:
    """Extend the lease by ``row.lease_s``; False: the lease is lost (re-claimed)."""
    cur = await conn.execute(_RENEW_SQL, {**_fence(row, owner), "lease_s": row.lease_s})
    return cur.rowcount == 1


@dataclass(frozen=True, slots=True)
class Finish:
    """One row's end, as ``finish_many`` writes it."""

    row: Claimed
    status: Finished
    payload: Any
    truncated: bool = False  # completed: the result was cut to fit (its delivery says so)


async def finish_many(conn: Connection, owner: str, finishes: list[Finish]) -> set[str]:
    """executing → completed | failed for every row still this claim's, in one
    statement; the ids written (a row missing was re-claimed: nothing changed)."""
    cur = await conn.execute(
        _FINISH_SQL,
        {
            "owner": owner,
            "ids": [f.row.id for f in finishes],
            "attempts": [f.row.attempt for f in finishes],
            "statuses": [f.status for f in finishes],
            "payloads": [Jsonb(f.payload) for f in finishes],
            "truncated": [f.truncated for f in finishes],
        },
    )
    return {str(r["id"]) for r in await cur.fetchall()}


async def finish(
    conn: Connection,
    row: Claimed,
    owner: str,
    status: Finished,
    payload: Any,
    *,
    truncated: bool = False,
) -> bool:
    """One row's ``finish_many``; False: the row is no longer this claim's."""
    written = await finish_many(conn, owner, [Finish(row, status, payload, truncated)])
    return row.id in written


async def release(
    conn: Connection, row: Claimed, owner: str, exhausted: dict[str, Any]
) -> str | None:
    """executing → approved, with a NOTIFY (or failed on the last attempt);
    the new status, or None when the row is no longer this claim's."""
    cur = await conn.execute(_RELEASE_SQL, {**_fence(row, owner), "exhausted": Jsonb(exhausted)})
    found = await cur.fetchone()
    return None if found is None else str(found["status"])


async def load_spec(conn: Connection, operation_id: int, version: int) -> Any:
    """The published spec (immutable), or None."""
    cur = await conn.execute(_SPEC_SQL, (operation_id, version))
    found = await cur.fetchone()
    return None if found is None else found["spec"]
