"""The delivery worker's statements: claim, keep the rendered body, finish.

Rows are written by the ``crank_enqueue_webhooks`` trigger (migrations/0008)
in the transaction of the approval change they report. A claim is one
statement, like the approval worker's (docs/architecture.md, "Leases and
fencing"): a ``MATERIALIZED`` CTE picks due rows ``FOR UPDATE SKIP LOCKED``
and the ``UPDATE`` leases them (``delivering``, attempts + 1). Due: ``pending``
with ``next_attempt_at`` past, or ``delivering`` with an expired lease (a
process died mid-delivery: the row is sent again, with the same webhook-id).
Rows of a revoked subscription are never claimed.

Everything after the claim is fenced on ``(id, attempts, status =
'delivering', lease_owner)``: a worker whose row was re-claimed writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from mcp_gateway.upkeep.metrics import count_lease_expiries
from shared.db import Connection

CHANNEL = "crank_webhooks"  # NOTIFY by the trigger when it enqueued a delivery
# The deliveries not yet made, read when /metrics is scraped (upkeep.backlog): select-list
# columns. A revoked subscription's deliveries are never claimed: no backlog anyone can
# work off.
BACKLOG_COLUMNS = """
       (SELECT count(*) FROM webhook_deliveries d
          JOIN webhook_subscriptions s ON s.id = d.subscription_id AND s.revoked_at IS NULL
         WHERE d.status IN ('pending', 'delivering')) AS webhooks,
       (SELECT coalesce(extract(epoch FROM now() - min(d.created_at)), 0)::float8
          FROM webhook_deliveries d
          JOIN webhook_subscriptions s ON s.id = d.subscription_id AND s.revoked_at IS NULL
         WHERE d.status IN ('pending', 'delivering')) AS oldest_webhook_s"""


@dataclass(frozen=True, slots=True)
class ClaimedDelivery:
    id: int
    attempts: int  # the fence
    webhook_id: str
    event: str
    workspace_id: int
    agent_id: int
    payload: dict[str, Any]
    body: bytes | None  # rendered at the first attempt, then kept
    url: str
    format: str
    sealed: tuple[bytes, bytes, str]  # the signing secret: ciphertext, nonce, key id
    subscription_id: str
    created_at_age_s: float  # seconds since the event was enqueued


_CLAIM_SQL = """
WITH candidate AS MATERIALIZED (
    SELECT d.id, d.status = 'delivering' AS lease_expired
      FROM webhook_deliveries d
      JOIN webhook_subscriptions s ON s.id = d.subscription_id AND s.revoked_at IS NULL
     WHERE (d.status = 'pending' AND d.next_attempt_at <= now())
        OR (d.status = 'delivering' AND d.lease_expires_at < now())
     ORDER BY d.next_attempt_at
     LIMIT %(limit)s
       FOR UPDATE OF d SKIP LOCKED
)
UPDATE webhook_deliveries d
   SET status = 'delivering', attempts = d.attempts + 1, lease_owner = %(owner)s,
       lease_expires_at = now() + make_interval(secs => %(lease_s)s)
  FROM candidate c, webhook_subscriptions s
 WHERE d.id = c.id AND s.id = d.subscription_id
RETURNING d.id, d.attempts, d.webhook_id, d.event, d.workspace_id, d.agent_id, d.payload,
          d.body, s.url, s.format, s.ciphertext, s.nonce, s.key_id, s.id AS subscription_id,
          extract(epoch FROM now() - d.created_at)::float8 AS age_s, c.lease_expired
"""

_FENCE = (
    "id = %(id)s AND attempts = %(attempts)s AND status = 'delivering' AND lease_owner = %(owner)s"
)

_KEEP_BODY_SQL = f"UPDATE webhook_deliveries SET body = %(body)s WHERE {_FENCE} AND body IS NULL"

_DELIVERED_SQL = f"""
UPDATE webhook_deliveries
   SET status = 'delivered', delivered_at = now(), finished_at = now(), lease_expires_at = NULL,
       last_status = %(http_status)s, last_error = NULL
 WHERE {_FENCE}
"""

# retry_s NULL: give up (failed); else pending again after retry_s.
_FAILED_ATTEMPT_SQL = f"""
UPDATE webhook_deliveries
   SET status = CASE WHEN %(retry_s)s::float8 IS NULL THEN 'failed' ELSE 'pending' END,
       next_attempt_at = CASE WHEN %(retry_s)s::float8 IS NULL THEN next_attempt_at
                              ELSE now() + make_interval(secs => %(retry_s)s::float8) END,
       finished_at = CASE WHEN %(retry_s)s::float8 IS NULL THEN now() END,
       lease_expires_at = NULL, last_status = %(http_status)s, last_error = %(error)s
 WHERE {_FENCE}
"""


def _fence(row: ClaimedDelivery, owner: str) -> dict[str, Any]:
    return {"id": row.id, "attempts": row.attempts, "owner": owner}


async def claim(
    conn: Connection, *, owner: str, limit: int, lease_s: float
) -> list[ClaimedDelivery]:
    cur = await conn.execute(_CLAIM_SQL, {"owner": owner, "limit": limit, "lease_s": lease_s})
    rows = await cur.fetchall()
    count_lease_expiries("webhooks", sum(r["lease_expired"] for r in rows))
    return [
        ClaimedDelivery(
            id=r["id"],
            attempts=r["attempts"],
            webhook_id=r["webhook_id"],
            event=r["event"],
            workspace_id=r["workspace_id"],
            agent_id=r["agent_id"],
            payload=r["payload"],
            body=None if r["body"] is None else bytes(r["body"]),
            url=r["url"],
            format=r["format"],
            sealed=(bytes(r["ciphertext"]), bytes(r["nonce"]), r["key_id"]),
            subscription_id=r["subscription_id"],
            created_at_age_s=float(r["age_s"]),
        )
        for r in rows
    ]


async def keep_body(conn: Connection, row: ClaimedDelivery, owner: str, body: bytes) -> bool:
    """Store the first rendering; False: the row is no longer this claim's."""
    cur = await conn.execute(_KEEP_BODY_SQL, {**_fence(row, owner), "body": body})
    return cur.rowcount == 1


async def delivered(conn: Connection, row: ClaimedDelivery, owner: str, http_status: int) -> bool:
    cur = await conn.execute(_DELIVERED_SQL, {**_fence(row, owner), "http_status": http_status})
    return cur.rowcount == 1


async def attempt_failed(
    conn: Connection,
    row: ClaimedDelivery,
    owner: str,
    *,
    error: str,
    http_status: int | None,
    retry_s: float | None,
) -> bool:
    """Pending again after ``retry_s``, or ``failed`` for good when it is None."""
    cur = await conn.execute(
        _FAILED_ATTEMPT_SQL,
        {**_fence(row, owner), "error": error, "http_status": http_status, "retry_s": retry_s},
    )
    return cur.rowcount == 1
