"""Record when keys and tokens were last used, in batches at minute granularity.

The request path only adds an id to a set; a background task writes the set
in one UPDATE. A crash loses at most one interval of "last used" times,
which is acceptable for a field that only helps admins spot stale keys.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Literal

import structlog
from psycopg import sql
from psycopg_pool import AsyncConnectionPool

from shared.db import Connection

log = structlog.get_logger(__name__)


class LastUseRecorder:
    def __init__(
        self, table: Literal["admin_tokens", "api_keys"], interval_s: float = 30.0
    ) -> None:
        self._table = table
        self._interval_s = interval_s
        self._pending: set[int] = set()
        self._task: asyncio.Task[None] | None = None

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

    def start(self, pool: AsyncConnectionPool[Connection]) -> None:
        async def loop() -> None:
            while True:
                await asyncio.sleep(self._interval_s)
                try:
                    await self.flush(pool)
                except Exception:
                    log.exception("last_use_flush_failed", table=self._table)

        self._task = asyncio.create_task(loop())

    async def stop(self, pool: AsyncConnectionPool[Connection]) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        try:
            await self.flush(pool)
        except Exception:  # shutting down: the interval's marks are lost, say so
            log.exception("last_use_final_flush_failed", table=self._table)
