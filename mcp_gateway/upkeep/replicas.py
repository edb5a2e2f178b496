"""How many gateway processes are alive, for sharing rate limits.

Every process (each granian worker is one) upserts its row in
``gateway_replicas`` every ``HEARTBEAT_S`` and, in the same statement, reads
the ids of the processes seen within ``LIVE_WINDOW_S``. Its share of a limit
follows from the count and its rank among the sorted ids
(mcp_gateway.transport.rate_limits). Off the hot path: requests only read two ints.

A new process is counted by the others at their next heartbeat (≤ HEARTBEAT_S);
a dead one drops out after LIVE_WINDOW_S. While the database is unreachable
the last known count stays. A graceful stop deletes the row at once.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from shared.db import DB_TIMEOUT_S, Connection, within
from shared.periodic import PeriodicTask

HEARTBEAT_S = 2.0
LIVE_WINDOW_S = 10.0
_PRUNE_AFTER_S = 3600  # rows of processes dead this long are deleted
_PRUNE_EVERY = 300  # beats: about every ten minutes

# The INSERT's row is invisible to the SELECT of the same statement, hence the UNION.
_BEAT_SQL = """
WITH me AS (
    INSERT INTO gateway_replicas (replica_id) VALUES (%(id)s)
    ON CONFLICT (replica_id) DO UPDATE SET heartbeat_at = now()
    RETURNING replica_id
)
SELECT replica_id FROM gateway_replicas
 WHERE heartbeat_at > now() - make_interval(secs => %(window)s)
UNION
SELECT replica_id FROM me
ORDER BY replica_id
"""
_PRUNE_SQL = "DELETE FROM gateway_replicas WHERE heartbeat_at < now() - make_interval(secs => %s)"
_LEAVE_SQL = "DELETE FROM gateway_replicas WHERE replica_id = %s"


class Replicas:
    """This process's heartbeat; ``share()`` is its (rank, count) among live replicas."""

    def __init__(self, pool: AsyncConnectionPool[Connection]) -> None:
        self._pool = pool
        self.replica_id = f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(4)}"
        self.count = 1
        self.rank = 0
        self._beats = 0
        # No back-off: a replica that beats less often than LIVE_WINDOW_S drops out
        # of the others' count, and a recovery should be seen within HEARTBEAT_S.
        self._task = PeriodicTask(
            "replica_heartbeat", self._heartbeat, interval_s=HEARTBEAT_S, retry_max_s=HEARTBEAT_S
        )

    def share(self) -> tuple[int, int]:
        return self.rank, self.count

    async def beat(self) -> None:
        async with self._pool.connection() as conn:
            cur = await conn.execute(_BEAT_SQL, {"id": self.replica_id, "window": LIVE_WINDOW_S})
            ids = [row["replica_id"] for row in await cur.fetchall()]
        self.count = len(ids)
        self.rank = ids.index(self.replica_id)

    async def _prune(self) -> None:
        async with self._pool.connection() as conn:
            await conn.execute(_PRUNE_SQL, (_PRUNE_AFTER_S,))

    async def _heartbeat(self) -> None:
        """One beat, and a prune of long-dead rows every ``_PRUNE_EVERY`` beats.

        A failed beat leaves the last count in use; the loop logs the outage once.
        """
        beats, self._beats = self._beats, self._beats + 1
        await within(DB_TIMEOUT_S, self.beat())
        if beats % _PRUNE_EVERY == 0:
            await within(DB_TIMEOUT_S, self._prune())

    def start(self) -> None:
        self._task.start(first_delay_s=0)

    async def stop(self) -> None:
        await self._task.stop()
        with contextlib.suppress(psycopg.Error, OSError, TimeoutError):
            await within(DB_TIMEOUT_S, self._leave())

    async def _leave(self) -> Any:
        async with self._pool.connection() as conn:
            await conn.execute(_LEAVE_SQL, (self.replica_id,))
