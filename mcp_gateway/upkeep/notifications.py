"""The process's one LISTEN connection: subsystems subscribe to Postgres channels.

Each notification calls its channel's callback with the payload; every
(re)connect calls every callback with None, since anything may have been
missed meanwhile, and a lost connection calls the callbacks that asked for it
(``on_loss``). Polling stays the fallback that works alone (behind PgBouncer,
``CRANK_MCP_LISTEN=false``, or while this connection is down;
docs/architecture.md, "Snapshot and refresh").

The connection reconnects by itself with a backoff and proves that it is alive
with a ``SELECT 1`` whenever it has been quiet for ``CHECK_S`` (a peer that
vanished without a FIN never errors otherwise).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import psycopg
import structlog

from shared.backoff import doubled
from shared.db import DB_TIMEOUT_S, connect, within
from shared.metrics import BACKGROUND_FAILURES

log = structlog.get_logger(__name__)

CHECK_S = 30.0
BACKOFF_MIN_S, BACKOFF_MAX_S = 0.5, 5.0
_FAILURES = BACKGROUND_FAILURES.labels("snapshot_listen")
_UNREACHABLE = (psycopg.OperationalError, psycopg.InterfaceError, OSError, TimeoutError)

Callback = Callable[[str | None], None]


class Notifications:
    """LISTENs on every subscribed channel once started (when ``enabled``)."""

    def __init__(self, conninfo: str, *, enabled: bool) -> None:
        self._conninfo = conninfo
        self._enabled = enabled
        self._callbacks: dict[str, Callback] = {}
        self._on_loss: list[Callback] = []
        self._task: asyncio.Task[None] | None = None
        self.listening = False

    def subscribe(self, channel: str, callback: Callback, *, on_loss: bool = False) -> None:
        """Before ``start``: ``callback(payload)`` per notification on ``channel``."""
        self._callbacks[channel] = callback
        if on_loss:
            self._on_loss.append(callback)

    async def start(self) -> None:
        if self._enabled:
            self._task = asyncio.create_task(self._loop(), name="notifications-listen")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _dispatch(self, channel: str, payload: str) -> None:
        callback = self._callbacks.get(channel)
        if callback is not None:
            callback(payload)

    async def _loop(self) -> None:
        backoff = BACKOFF_MIN_S
        while True:
            try:
                async with await connect(self._conninfo, autocommit=True) as conn:
                    for channel in self._callbacks:
                        await conn.execute(f"LISTEN {channel}")
                    self.listening = True
                    backoff = BACKOFF_MIN_S
                    for callback in self._callbacks.values():
                        callback(None)  # anything missed while not listening
                    while True:
                        async for note in conn.notifies(timeout=CHECK_S):
                            self._dispatch(note.channel, note.payload)
                        await within(DB_TIMEOUT_S, conn.execute("SELECT 1"))
            except _UNREACHABLE as exc:
                _FAILURES.inc()
                if self.listening:
                    log.warning("snapshot_listen_lost", error=str(exc) or type(exc).__name__)
            except Exception:
                _FAILURES.inc()
                log.exception("snapshot_listen_failed")
            if self.listening:
                self.listening = False
                for callback in self._on_loss:
                    callback(None)  # let the polls find out whether the database is gone
            await asyncio.sleep(backoff)
            backoff = doubled(backoff, BACKOFF_MAX_S)
