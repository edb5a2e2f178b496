"""Keeps the snapshot and the session termination list current.

Every ``CRANK_MCP_REFRESH_MS`` one tiny query reads the catalog version and the
newest termination id; only a change costs more. LISTEN wakes the loop at
once on a publish or a session DELETE; polling alone still works (behind
PgBouncer, or while the listening connection is down). When Postgres goes
away the last snapshot keeps serving, ``ready`` turns false, and the loop
recovers by itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.snapshot import Snapshot, load_snapshot
from shared.db import Connection, connect

log = structlog.get_logger(__name__)

CHANNELS = ("crank_catalog", "crank_sessions")


class Refresher:
    def __init__(
        self,
        database_url: str,
        pool: AsyncConnectionPool[Connection],
        *,
        refresh_s: float,
        listen: bool,
        on_swap: Callable[[Snapshot, Snapshot], None],
    ) -> None:
        self._database_url = database_url
        self._pool = pool
        self._refresh_s = refresh_s
        self._listen = listen
        self._on_swap = on_swap
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._last_termination_id = 0
        self.snapshot = Snapshot.empty()
        self.terminated: dict[bytes, float] = {}  # session hash -> its expiry (unix time)
        self.loaded = False
        self.last_success = 0.0  # time.monotonic() of the last good poll
        self.listening = False

    @property
    def ready(self) -> bool:
        """Loaded once and heard from the database within three intervals."""
        return self.loaded and time.monotonic() - self.last_success < 3 * self._refresh_s + 1

    def wake(self) -> None:
        self._wake.set()

    def note_termination(self, digest: bytes, expires_at: float) -> None:
        """This replica ended a session: refuse it here without waiting for the poll."""
        self.terminated[digest] = expires_at

    async def start(self) -> None:
        try:
            await self.refresh()
        except Exception:
            log.exception("snapshot_initial_load_failed")
        self._tasks.append(asyncio.create_task(self._poll_loop(), name="snapshot-poll"))
        if self._listen:
            self._tasks.append(asyncio.create_task(self._listen_loop(), name="snapshot-listen"))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def refresh(self) -> None:
        async with self._pool.connection(timeout=5) as conn:
            cur = await conn.execute(
                """SELECT (SELECT version FROM catalog_state) AS version,
                          (SELECT coalesce(max(id), 0) FROM mcp_session_terminations) AS ended"""
            )
            row = await cur.fetchone()
            assert row is not None
            if row["version"] != self.snapshot.version or not self.loaded:
                new = await load_snapshot(conn)
                old, self.snapshot = self.snapshot, new
                self.loaded = True
                log.info("snapshot_loaded", version=new.version, agents=len(new.agents))
                self._on_swap(old, new)
            if row["ended"] > self._last_termination_id:
                cur = await conn.execute(
                    """SELECT id, session_hash, extract(epoch FROM expires_at) AS expires
                         FROM mcp_session_terminations
                        WHERE id > %s AND expires_at > now() ORDER BY id""",
                    (self._last_termination_id,),
                )
                for ended in await cur.fetchall():
                    self.terminated[bytes(ended["session_hash"])] = float(ended["expires"])
                self._last_termination_id = row["ended"]
        now = time.time()
        for digest in [d for d, expires in self.terminated.items() if expires <= now]:
            del self.terminated[digest]
        self.last_success = time.monotonic()

    async def _poll_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=self._refresh_s)
            self._wake.clear()
            try:
                await self.refresh()
            except Exception:
                log.warning("snapshot_refresh_failed", exc_info=True)

    async def _listen_loop(self) -> None:
        backoff = 0.5
        while True:
            try:
                async with await connect(self._database_url, autocommit=True) as conn:
                    for channel in CHANNELS:
                        await conn.execute(f"LISTEN {channel}")
                    self.listening = True
                    backoff = 0.5
                    self._wake.set()  # anything missed while not listening
                    async for _ in conn.notifies():
                        self._wake.set()
            except asyncio.CancelledError:
                raise
            except Exception:
                log.warning("snapshot_listen_failed", exc_info=True)
            self.listening = False
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, 10.0)
