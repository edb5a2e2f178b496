"""The approval worker's statements: claim, renew, finish, release.

A claim is one statement (docs/architecture.md, "SQL patterns"): a ``MATERIALIZED`` CTE picks claimable
rows ``FOR UPDATE SKIP LOCKED``, so concurrent claimers on any replica
never wait on each other and never take the same row, and the ``UPDATE``
moves them in the same breath. Claimable: ``approved``, or ``executing`` with
an expired lease. A row whose attempts are spent (``attempt >= max_attempts``)
and whose lease expired becomes ``failed`` in that same statement instead.

The lease is ``timeout_ms * (retries + 1) + margin`` of the row's operation
version (the longest the executor may take with its retries), computed here
from ``operation_versions.spec``.

Renew, finish and release are fenced on ``(id, attempt, status = 'executing',
lease_owner)``: a worker whose row was re-claimed (attempt + 1, another
owner) changes nothing, and learns so from the row count.

The ``approvals_transition`` trigger (migrations/0004) skips any UPDATE outside
the edges of docs/architecture.md, "Approval state machine";
every statement here moves along an allowed one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from psycopg.types.json import Jsonb

from mcp_gateway.upkeep.metrics import count_lease_expiries
from shared.approval_decisions import CHANNEL as CHANNEL  # the workers' wake-up
from shared.db import Connection

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
