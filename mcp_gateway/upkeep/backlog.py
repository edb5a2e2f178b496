"""The work waiting in the database, read when /metrics is scraped: active approvals by
status, the oldest one pending a decision, and the webhook deliveries not yet made.

Never on the hot path: one statement, only when scraped, at most once per
``max_age_s`` however often the port is scraped (concurrent scrapes share one
read), and bounded by ``timeout_s``. While the database does not answer the
gauges are NaN, so an alert comparing them neither fires nor clears on a guess;
``crank_database_reachable`` tells that story (docs/operations.md, "Metrics").
The partial indexes of migrations 0004 and 0008 keep the counts to the active rows.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

import structlog
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.upkeep.metrics import (
    APPROVAL_OLDEST_PENDING,
    APPROVALS,
    WEBHOOK_BACKLOG,
    WEBHOOK_OLDEST_UNDELIVERED,
)
from shared.db import Connection, within
from shared.periodic import EXPECTED

log = structlog.get_logger(__name__)

ACTIVE_STATUSES = ("pending", "approved", "executing")


class BacklogGauges:
    """``refresh()`` before a scrape: sets the backlog gauges from one read."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        columns: list[str],
        *,
        timeout_s: float = 2.0,
        max_age_s: float = 5.0,
    ) -> None:
        self._pool = pool
        # One statement over the select-list columns each aggregate owns (the approvals
        # store, the webhook outbox): the tables' SQL stays with them.
        self._sql = "SELECT " + ",".join(columns)
        self._timeout_s = timeout_s
        self._max_age_s = max_age_s
        self._read_at = -math.inf  # time.monotonic() of the last read, good or not
        self._lock = asyncio.Lock()

    async def refresh(self) -> None:
        async with self._lock:
            if time.monotonic() - self._read_at < self._max_age_s:
                return
            try:
                row = await within(self._timeout_s, self._read())
            except EXPECTED as exc:
                log.info("backlog_metrics_unavailable", error=str(exc) or type(exc).__name__)
                row = None
            self._read_at = time.monotonic()
            _show(row)

    async def _read(self) -> dict[str, Any]:
        async with self._pool.connection(timeout=self._timeout_s) as conn:
            cur = await conn.execute(self._sql.encode())
            row = await cur.fetchone()
        assert row is not None
        return row


def _show(row: dict[str, Any] | None) -> None:
    def value(name: str) -> float:
        return math.nan if row is None else float(row[name])

    for status in ACTIVE_STATUSES:
        APPROVALS.labels(status).set(value(status))
    APPROVAL_OLDEST_PENDING.set(value("oldest_pending_s"))
    WEBHOOK_BACKLOG.set(value("webhooks"))
    WEBHOOK_OLDEST_UNDELIVERED.set(value("oldest_webhook_s"))
