"""The expiry sweep: pending approvals past ``expires_at`` become ``expired``.

Every gateway process runs it every ``INTERVAL_S`` (shared.periodic); the
UPDATE skips rows another process holds, so replicas never wait on each
other. The sweep keeps
lists and retention honest; correctness does not depend on it, because a
decision, a read and a repeat tools/call expire an overdue row themselves
(mcp_gateway.approvals.store).
"""

from __future__ import annotations

import structlog
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals.store import expire_overdue
from shared.db import Connection
from shared.periodic import PeriodicTask

log = structlog.get_logger(__name__)

INTERVAL_S = 30.0


class ExpirySweeper:
    """Expires overdue pending approvals every ``interval_s`` between ``start`` and ``stop``."""

    def __init__(
        self, pool: AsyncConnectionPool[Connection], interval_s: float = INTERVAL_S
    ) -> None:
        self._pool = pool
        self._task = PeriodicTask("approval_expiry", self.sweep_once, interval_s=interval_s)

    async def sweep_once(self) -> int:
        async with self._pool.connection() as conn:
            expired = await expire_overdue(conn)
        if expired:
            log.info("approvals_expired", count=expired)
        return expired

    def start(self) -> None:
        self._task.start()

    async def stop(self) -> None:
        await self._task.stop()
