"""Record when keys and tokens were last used, in batches at minute granularity.

The request path only adds an id to a set; a background loop
(shared.periodic) writes the set in one UPDATE, and once more on stop. A
crash loses at most one interval of "last used" times, which is acceptable
for a field that only helps admins spot stale keys.
"""

from __future__ import annotations

from typing import Literal

import structlog
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from shared.db import Connection
from shared.periodic import PeriodicTask

log = structlog.get_logger(__name__)


class LastUseRecorder:
    """``mark`` on the request path; a loop between ``start`` and ``stop`` writes the marks."""

    def __init__(
        self, table: Literal["admin_tokens", "api_keys"], interval_s: float = 30.0
    ) -> None:
        self._table = table
        self._pending: set[int] = set()
        self._pool: AsyncConnectionPool[Connection] | None = None  # given by start or stop
        self._task = PeriodicTask(f"last_use_{table}", self._flush_held, interval_s=interval_s)

    def mark(self, row_id: int) -> None:
        self._pending.add(row_id)

    async def flush(self, pool: AsyncConnectionPool[Connection]) -> None:
        if not self._pending:
            return
        ids, self._pending = sorted(self._pending), set()
        query = sql.SQL(
            "UPDATE {} SET last_used_at = date_trunc('minute', now()) "
            "WHERE id = ANY(%s) AND (last_used_at IS NULL "
            "OR last_used_at < date_trunc('minute', now()))"
        ).format(sql.Identifier(self._table))
        async with pool.connection() as conn:
            await conn.execute(query, (ids,))

    async def _flush_held(self) -> None:
        if self._pool is not None:
            await self.flush(self._pool)

    def start(self, pool: AsyncConnectionPool[Connection]) -> None:
        self._pool = pool
        self._task.start()

    async def stop(self, pool: AsyncConnectionPool[Connection]) -> None:
        """Stop the loop and write the marks it still holds."""
        self._pool = pool
        try:
            await self._task.stop(final_run=True)
        except Exception:  # shutting down: the interval's marks are lost, say so
            log.exception("last_use_final_flush_failed", table=self._table)
