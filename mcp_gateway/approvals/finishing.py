"""Finishing approved calls in batches: every outcome that waits goes in one statement.

Each finish costs the database a commit, and a commit waits for the WAL to
reach the disk; with a fast upstream that wait, not the call, bounds how many
approved calls a process runs per second. So ``Finisher.finish`` queues the
outcome and one flush at a time writes everything queued since the last one
(``store.finish_many``: one statement, one transaction, each row fenced on
its own ``(id, attempt)`` and the owner). A lone outcome is written at once;
outcomes that arrive while a flush is under way go in the next one, so the
batch grows with the load (group commit; docs/architecture.md, "Leases and
fencing"). The webhook outbox rows of every transition are written by the
trigger in that same transaction.

A failed flush fails every outcome in it (nothing of it was written: one
statement); each caller retries on its own while its lease lasts
(mcp_gateway.approvals.worker).
"""

from __future__ import annotations

import asyncio

from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals import store
from mcp_gateway.approvals.store import Finish
from shared.db import DB_TIMEOUT_S, Connection, within

MAX_BATCH = 256  # rows per statement; more wait for the next flush


class Finisher:
    """One per worker: queues finishes and writes them in batches, one flush at a time."""

    def __init__(self, pool: AsyncConnectionPool[Connection], owner: str) -> None:
        self._pool = pool
        self._owner = owner
        self._queued: list[tuple[Finish, asyncio.Future[bool]]] = []
        self._flushing: asyncio.Task[None] | None = None
        self.flushes = 0  # statements written (tests read it)

    async def finish(self, item: Finish) -> bool:
        """Written: True; False: the row is no longer this claim's (nothing changed).
        Raises what the database raised."""
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queued.append((item, future))
        if self._flushing is None or self._flushing.done():
            self._flushing = asyncio.create_task(self._flush(), name="approval-finishes")
        return await future

    async def stop(self) -> None:
        """End a flush still under way (its callers have given up: shutdown)."""
        if self._flushing is not None and not self._flushing.done():
            self._flushing.cancel()
            await asyncio.wait({self._flushing})

    async def _flush(self) -> None:
        while self._queued:
            batch, self._queued = self._queued[:MAX_BATCH], self._queued[MAX_BATCH:]
            batch = [(item, future) for item, future in batch if not future.done()]
            if not batch:
                continue
            try:
                written = await within(DB_TIMEOUT_S, self._write([item for item, _ in batch]))
            except asyncio.CancelledError:
                for _, future in batch + self._queued:
                    future.cancel()
                self._queued = []
                raise
            except Exception as exc:  # every caller decides (retry, or leave to the lease)
                for _, future in batch:
                    if not future.done():
                        future.set_exception(exc)
                continue
            for item, future in batch:
                if not future.done():
                    future.set_result(item.row.id in written)

    async def _write(self, items: list[Finish]) -> set[str]:
        self.flushes += 1
        async with self._pool.connection() as conn:
            return await store.finish_many(conn, self._owner, items)
