"""Ended sessions: the termination list every replica refuses, and every statement
on ``mcp_session_terminations``.

A DELETE on any replica inserts the session's hash (never the id) with the
session's expiry and sends ``NOTIFY crank_sessions``; every replica learns it
at once through the notification, or by polling within one
``CRANK_MCP_REFRESH_MS``. A hash is kept until the session would have expired
anyway; the rows are pruned then (mcp_gateway.upkeep.retention).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from mcp_gateway.upkeep.health import DatabaseHealth
from shared.db import DB_TIMEOUT_S, Connection, within
from shared.periodic import EXPECTED, PeriodicTask

log = structlog.get_logger(__name__)

CHANNEL = "crank_sessions"
_NEW = """SELECT id, session_hash, extract(epoch FROM expires_at) AS expires
            FROM mcp_session_terminations
           WHERE id > %s AND expires_at > now() ORDER BY id"""
_END = """INSERT INTO mcp_session_terminations (session_hash, expires_at) VALUES (%s, %s)
          ON CONFLICT (session_hash) DO NOTHING"""


class NotRecorded(Exception):
    """The end of a session could not be recorded now (the database is away)."""


class Terminations:
    """The hashes of ended sessions, with their expiry (unix time)."""

    def __init__(
        self, pool: AsyncConnectionPool[Connection], health: DatabaseHealth, *, refresh_s: float
    ) -> None:
        self._pool = pool
        self._health = health
        self.ended: dict[bytes, float] = {}  # read on every session request: a plain dict
        self._last_id = 0
        self._poller = PeriodicTask("session_terminations", self.refresh, interval_s=refresh_s)

    def wake(self, _payload: str | None = None) -> None:
        """A notification (or a reconnected listener): read new ends now."""
        self._poller.wake()

    async def start(self) -> None:
        try:
            await self.refresh()
        except EXPECTED as exc:  # the loop tries again
            log.warning("session_terminations_unavailable", error=str(exc) or type(exc).__name__)
        self._poller.start()

    async def stop(self) -> None:
        await self._poller.stop()

    async def refresh(self) -> None:
        """Learn the ends recorded since the last look; forget the expired ones."""
        async with self._pool.connection(timeout=DB_TIMEOUT_S) as conn:
            cur = await conn.execute(_NEW, (self._last_id,))
            rows = await cur.fetchall()
        for row in rows:
            self.ended[bytes(row["session_hash"])] = float(row["expires"])
            self._last_id = max(self._last_id, int(row["id"]))
        now = time.time()
        for digest in [d for d, expires in self.ended.items() if expires <= now]:
            del self.ended[digest]

    async def end(self, digest: bytes, expires_at: float) -> None:
        """End a session on every replica; raises NotRecorded when that cannot be done now."""
        if not self._health.reachable:  # fail fast during an outage
            raise NotRecorded

        async def record() -> None:
            async with self._pool.connection(timeout=DB_TIMEOUT_S) as conn:
                await conn.execute(_END, (digest, datetime.fromtimestamp(expires_at, UTC)))
                await conn.execute("SELECT pg_notify(%s, '')", (CHANNEL,))

        try:
            await within(DB_TIMEOUT_S, record())  # a hard bound, even if the server went silent
        except (psycopg.Error, TimeoutError, PoolTimeout):
            log.warning("session_delete_failed", exc_info=True)
            raise NotRecorded from None
        self.ended[digest] = expires_at  # refused here at once, before the poll
