"""Prune what only grows: old call log and audit rows, finished approvals and
webhook deliveries, expired session ends and console sessions.

Every gateway process runs the loop; a Postgres advisory lock lets one of
them work at a time, and the others skip that round. Rows go in batches of
``BATCH`` so no delete holds locks or bloats WAL for long, with a bounded
number of batches per round (the next round carries on).
Retention periods: ``CRANK_CALL_LOG_RETENTION_DAYS`` and
``CRANK_AUDIT_LOG_RETENTION_DAYS``, ``CRANK_APPROVALS_RETENTION_DAYS`` and
``CRANK_WEBHOOK_RETENTION_DAYS`` (0 keeps rows forever; an approval or a
webhook delivery counts from when it finished, and active ones are never
pruned, nor finished approvals whose outcome a repeat call may still get, see
``CRANK_APPROVAL_OUTCOME_RETENTION_S``); a session end is
kept until the session would have expired anyway, a used confirmation token
until the token expires, an idempotency record until its ``expires_at``
(``CRANK_IDEMPOTENCY_RETENTION_S`` after it was claimed or completed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import structlog
from psycopg_pool import AsyncConnectionPool

from shared.db import Connection
from shared.periodic import PeriodicTask
from shared.settings import Settings

log = structlog.get_logger(__name__)

INTERVAL_S = 600.0
FIRST_RUN_S = 30.0  # after start, so a rolling restart does not prune N times at once
RETRY_MAX_S = 3600.0  # the longest wait after failed rounds
BATCH = 5000
MAX_BATCHES = 100
_LOCK_KEY = 0x6372616E6B0002  # "crank" + 2; migrations use their own key


@dataclass(frozen=True, slots=True)
class Rule:
    table: str
    condition: str  # SQL over the table's columns; %s is the retention in days, if any
    days: int | None  # None: the condition needs no period; 0: keep forever
    key: str = "id"  # the column(s) that name one row


def rules(settings: Settings) -> list[Rule]:
    return [
        Rule(
            "call_log",
            "called_at < now() - make_interval(days => %s)",
            settings.call_log_retention_days,
        ),
        Rule(
            "audit_log", "at < now() - make_interval(days => %s)", settings.audit_log_retention_days
        ),
        # Delivered and failed webhook deliveries: the delivery log keeps them this long.
        Rule(
            "webhook_deliveries",
            "status IN ('delivered', 'failed') AND finished_at < now() - make_interval(days => %s)",
            settings.webhook_retention_days,
        ),
        Rule("mcp_session_terminations", "expires_at < now()", None),
        # The web console's expired sessions and sign-in links (control_plane.console).
        Rule("console_sessions", "expires_at < now()", None),
        Rule("console_sign_in_links", "expires_at < now()", None, key="hash"),
        # A waiter deletes its row; only a crashed replica's row is left here.
        Rule("elicitation_answers", "created_at < now() - interval '1 day'", None),
        # A used token past its expiry is refused for being expired anyway.
        Rule("confirmation_uses", "expires_at < now()", None, key="token_hash"),
        # CRANK_IDEMPOTENCY_RETENTION_S is in each row's expires_at; an expired
        # row is already forgotten by the gateway, this only frees the space.
        Rule(
            "idempotency_records",
            "expires_at < now()",
            None,
            key="(agent_id, operation_id, key_hash)",
        ),
    ]


async def _prune_rule(conn: Connection, rule: Rule) -> int:
    # The table and condition are constants of this module, never input. The
    # condition is checked again on the row being deleted: a row changed since
    # the subquery saw it (an expired idempotency record claimed anew) stays.
    statement = (
        f"DELETE FROM {rule.table} WHERE {rule.key} IN "
        f"(SELECT {rule.key.strip('()')} FROM {rule.table} WHERE {rule.condition} LIMIT {BATCH})"
        f" AND {rule.condition}"
    )
    params = (rule.days, rule.days) if rule.days is not None else ()
    deleted = 0
    for _ in range(MAX_BATCHES):
        cur = await conn.execute(statement.encode(), params)
        deleted += cur.rowcount
        if cur.rowcount < BATCH:
            break
    return deleted


async def prune_once(
    pool: AsyncConnectionPool[Connection], settings: Settings, extra: Sequence[Rule] = ()
) -> dict[str, int] | None:
    """One round over ``rules(settings)`` and ``extra`` (the rules of the tables whose
    statements live with their aggregate, e.g. approvals); None when another process
    holds the lock. Needs an autocommit pool."""
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT pg_try_advisory_lock(%s) AS locked", (_LOCK_KEY,))
        row = await cur.fetchone()
        if not row or not row["locked"]:
            return None
        try:
            counts = {}
            for rule in [*rules(settings), *extra]:
                if rule.days != 0:
                    counts[rule.table] = await _prune_rule(conn, rule)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (_LOCK_KEY,))
    if any(counts.values()):
        log.info("retention_pruned", **counts)
    return counts


class Pruner:
    """Runs ``prune_once`` every ``interval_s`` in the background (shared.periodic)."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        settings: Settings,
        *,
        extra: Sequence[Rule] = (),
        interval_s: float = INTERVAL_S,
        first_run_s: float = FIRST_RUN_S,
    ) -> None:
        self._pool = pool
        self._settings = settings
        self._extra = tuple(extra)
        self._first_run_s = first_run_s
        # A failed round is retried after one interval, then less and less often.
        self._task = PeriodicTask(
            "retention", self._prune, interval_s=interval_s, retry_max_s=RETRY_MAX_S
        )

    async def _prune(self) -> None:
        await prune_once(self._pool, self._settings, self._extra)

    def start(self) -> None:
        self._task.start(first_delay_s=self._first_run_s)

    async def stop(self) -> None:
        await self._task.stop()
