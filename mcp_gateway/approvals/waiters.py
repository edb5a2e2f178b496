"""Calls held open for their approval, by approval id (docs/architecture.md,
"Waiting for a decision").

A waiting tools/call registers its approval id here and awaits an event. The
event is set when the approval finishes, on any replica:

- at once by ``NOTIFY crank_approval_finished`` (payload: the approval id),
  which the trigger of migrations/0009_approval_wait.sql sends for every row
  that becomes denied, expired, completed or failed; the process's LISTEN
  connection hands it to ``finished``;
- else by the poll: every ``poll_s`` while anyone waits, one query for all the
  ids waited on in this process (not one per waiter), so a lost notification,
  a LISTEN connection that is down, or ``CRANK_MCP_LISTEN=false`` costs at most
  one interval.

``shut_down`` (the first SIGTERM) ends every wait at once: the calls answer the
seed's ``approval_required`` and the approvals stay as they are.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager

from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals.store import FINISHED_IDS_SQL
from mcp_gateway.upkeep.metrics import APPROVAL_WAITERS
from shared.db import DB_TIMEOUT_S, Connection
from shared.periodic import PeriodicTask

CHANNEL = "crank_approval_finished"  # NOTIFY payload: the approval id
POLL_S = 1.0


class ApprovalWaiters:
    """This process's waits by approval id; see the module docstring."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        *,
        poll_s: float = POLL_S,
        name: str = "approval_wait_poll",
        finished_sql: str = FINISHED_IDS_SQL,  # the ids of ``%s`` that are done
        counted: bool = True,  # in the approval-waiters gauge
    ) -> None:
        self._pool = pool
        self._waits: dict[str, set[asyncio.Event]] = defaultdict(set)
        self._closing = asyncio.Event()
        self._finished_sql = finished_sql
        self._counted = counted
        self._poller = PeriodicTask(name, self._poll, interval_s=poll_s)

    def start(self) -> None:
        self._poller.start()

    async def stop(self) -> None:
        self.shut_down()
        await self._poller.stop()

    def shut_down(self) -> None:
        """End every wait now (callable from a signal handler via call_soon_threadsafe)."""
        self._closing.set()
        for events in self._waits.values():
            for event in events:
                event.set()

    @property
    def closing(self) -> bool:
        return self._closing.is_set()

    def count(self) -> int:
        return sum(len(events) for events in self._waits.values())

    @contextmanager
    def waiting(self, approval_id: str) -> Iterator[asyncio.Event]:
        """An event set once ``approval_id`` finished (or the process shuts down)."""
        event = asyncio.Event()
        if self._closing.is_set():
            event.set()
        self._waits[approval_id].add(event)
        if self._counted:
            APPROVAL_WAITERS.inc()
        try:
            yield event
        finally:
            if self._counted:
                APPROVAL_WAITERS.dec()
            events = self._waits.get(approval_id)
            if events is not None:
                events.discard(event)
                if not events:
                    del self._waits[approval_id]

    def finished(self, approval_id: str | None) -> None:
        """A notification: ``approval_id`` finished; None (the listener reconnected,
        anything may have been missed): poll now."""
        if approval_id is None:
            self._poller.wake()
            return
        for event in self._waits.get(approval_id, ()):
            event.set()

    async def _poll(self) -> None:
        ids = list(self._waits)
        if not ids:
            return
        async with self._pool.connection(timeout=DB_TIMEOUT_S) as conn:
            cur = await conn.execute(self._finished_sql, (ids,))
            for row in await cur.fetchall():
                self.finished(str(row["id"]))
