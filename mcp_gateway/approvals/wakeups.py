"""Telling every replica's worker that rows were approved: one NOTIFY for many decisions.

A transaction that sends NOTIFY holds PostgreSQL's one database-wide notify
lock from its pre-commit until it ends, WAL flush included, so notifying
commits run one at a time and never share a flush. A ``pg_notify`` in every
decision made the approve endpoint one commit-and-flush per decision, every
replica together (docs/architecture.md, "Leases and fencing"). So a decision
commits without it, and ``Wakeups.approved`` then wakes this process's worker
at once and asks for a ``NOTIFY crank_approvals`` for the others: one is sent
at a time, and every request made while one is under way is answered by the
single next one. A NOTIFY that fails is logged; the other replicas' poll
(``POLL_S``) finds the rows instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog
from psycopg_pool import AsyncConnectionPool

from shared.approval_decisions import notify_approved
from shared.db import DB_TIMEOUT_S, Connection, within
from shared.periodic import EXPECTED

log = structlog.get_logger(__name__)


class Wakeups:
    """One per process: the local wake-up and the coalesced NOTIFY."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        wake_local: Callable[[], None],
        *,
        timeout_s: float = DB_TIMEOUT_S,
    ) -> None:
        self._pool = pool
        self._wake_local = wake_local
        self._timeout_s = timeout_s
        self._asked = False
        self._sending: asyncio.Task[None] | None = None
        self.sent = 0  # NOTIFY statements sent (tests read it)

    def approved(self) -> None:
        """Rows were approved and committed: wake the workers here and on every replica."""
        self._wake_local()
        self._asked = True
        if self._sending is None or self._sending.done():
            self._sending = asyncio.create_task(self._send(), name="approval-wakeups")

    async def stop(self) -> None:
        if self._sending is not None and not self._sending.done():
            self._sending.cancel()
            await asyncio.wait({self._sending})

    async def _send(self) -> None:
        while self._asked:
            self._asked = False
            try:
                await within(self._timeout_s, self._notify())
            except EXPECTED as exc:  # the others' poll finds the rows
                log.warning("approval_notify_failed", error=str(exc) or type(exc).__name__)

    async def _notify(self) -> None:
        self.sent += 1
        async with self._pool.connection() as conn:
            await notify_approved(conn)
