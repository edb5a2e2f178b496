"""Keeps the snapshot current (docs/architecture.md, "Snapshot and refresh").

Polls the catalog version on a connection of its own, woken early by ``crank_catalog``,
and reports each poll to ``DatabaseHealth`` (docs/architecture.md, "Database outages");
loads may read a replica (docs/architecture.md, "Snapshot loads from a read replica").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable
from typing import Any

import psycopg
import structlog
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from mcp_gateway.catalog.builder import BuildStats, SnapshotBuilder
from mcp_gateway.catalog.snapshot import Snapshot, SnapshotOptions
from mcp_gateway.upkeep.health import DatabaseHealth
from mcp_gateway.upkeep.metrics import SNAPSHOT_BUILD, SNAPSHOT_LOADS, SNAPSHOT_TOOLS_COMPILED
from shared.db import DB_TIMEOUT_S, Connection, connect, within
from shared.periodic import PeriodicTask

log = structlog.get_logger(__name__)

CHANNEL = "crank_catalog"  # NOTIFY on every publish, key, secret or egress change
# Connecting plus the version query, and a whole snapshot load, may take this long.
_PROBE_TIMEOUT_S = DB_TIMEOUT_S
_LOAD_TIMEOUT_S = 30.0
# While the database is unreachable, polls are retried at least this often.
_RETRY_MIN_S, _RETRY_MAX_S = 0.25, 2.0
# A replica behind the primary this many loads in a row: the next load reads the primary.
_REPLICA_PATIENCE = 3

# Errors that mean "the database cannot be reached or did not answer in time".
_UNREACHABLE = (psycopg.OperationalError, psycopg.InterfaceError, OSError, TimeoutError)
# Connection defaults that turn a dead or silent server into an error instead of a hang.
_CONNECT_DEFAULTS = {
    "connect_timeout": "5",
    "keepalives": "1",
    "keepalives_idle": "30",
    "keepalives_interval": "10",
    "keepalives_count": "3",
}


_PROBE_SQL = "SELECT version FROM catalog_state"


async def _fetch_one(conn: Connection, sql: str) -> dict[str, Any] | None:
    cur = await conn.execute(sql)
    return await cur.fetchone()


def resilient_conninfo(database_url: str) -> str:
    """``database_url`` plus a connect timeout and TCP keepalives, unless it sets them."""
    given = conninfo_to_dict(database_url)
    extra = {name: value for name, value in _CONNECT_DEFAULTS.items() if name not in given}
    if "PGCONNECT_TIMEOUT" in os.environ:
        extra.pop("connect_timeout", None)
    return make_conninfo(database_url, **extra)


class Refresher:
    """Keeps ``snapshot`` current; ``on_swap(old, new)`` per swap."""

    def __init__(
        self,
        conninfo: str,
        *,
        refresh_s: float,
        health: DatabaseHealth,
        on_swap: Callable[[Snapshot, Snapshot], None],
        options: SnapshotOptions | None = None,
        snapshot_conninfo: str | None = None,
    ) -> None:
        self._conninfo = conninfo
        # Where snapshots are loaded from when it is not the primary (a read replica).
        self._snapshot_conninfo = snapshot_conninfo
        self._snapshot_conn: Connection | None = None
        self._replica_behind = 0  # loads in a row the replica had not caught up for
        self._refresh_s = refresh_s
        self._health = health
        self._on_swap = on_swap
        self._builder = SnapshotBuilder(options)
        # The poll repeats in the shared loop (shared.periodic): while the database
        # is unreachable it retries sooner than the interval, from _RETRY_MIN_S
        # doubling to _RETRY_MAX_S.
        self._poller = PeriodicTask(
            "snapshot_poll",
            self._poll,
            interval_s=refresh_s,
            retry_s=min(_RETRY_MIN_S, refresh_s),
            retry_max_s=min(_RETRY_MAX_S, refresh_s),
            expected=_UNREACHABLE,
        )
        self._conn: Connection | None = None  # the poll's own connection
        self.snapshot = Snapshot.empty()
        self.loaded = False

    @property
    def ready(self) -> bool:
        """Loaded, the last poll reached the database, and it did so within three intervals."""
        return (
            self.loaded
            and self._health.reachable
            and time.monotonic() - self._health.last_success < 3 * self._refresh_s + 1
        )

    def wake(self, _payload: str | None = None) -> None:
        """Poll now (a notification, or the listener reconnected or lost)."""
        self._poller.wake()

    async def start(self) -> None:
        await self._poll_once()
        self._poller.start(
            first_delay_s=self._refresh_s if self._health.reachable else _RETRY_MIN_S
        )

    async def stop(self) -> None:
        await self._poller.stop()
        await self._drop_connection()
        await self._drop_snapshot_connection()

    async def refresh(self) -> None:
        """One poll; raises what the database raised (the connection is then dropped)."""
        if self._conn is None or self._conn.closed:
            async with asyncio.timeout(_PROBE_TIMEOUT_S):
                self._conn = await connect(self._conninfo, autocommit=True)
        conn = self._conn
        try:
            await self._refresh_on(conn)
        except BaseException:
            if self._conn is conn:
                self._conn = None
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()
            raise
        self._health.succeeded(self.snapshot.version)

    async def _refresh_on(self, conn: Connection) -> None:
        row = await within(_PROBE_TIMEOUT_S, _fetch_one(conn, _PROBE_SQL))
        assert row is not None
        if row["version"] != self.snapshot.version or not self.loaded:
            new = await self._load(conn, row["version"])
            if new is not None:
                old, self.snapshot = self.snapshot, new
                self.loaded = True
                self._built(self._builder.last, new)
                self._on_swap(old, new)

    async def _load(self, primary: Connection, probed: int) -> Snapshot | None:
        """The next snapshot: from the replica when there is one and it has caught up
        with ``probed`` (the primary's version), else from ``primary``. None: the
        replica is behind; the snapshot in memory stays until a later poll."""
        if self._snapshot_conninfo is not None and self._replica_behind < _REPLICA_PATIENCE:
            try:
                if self._snapshot_conn is None or self._snapshot_conn.closed:
                    async with asyncio.timeout(_PROBE_TIMEOUT_S):
                        self._snapshot_conn = await connect(
                            self._snapshot_conninfo, autocommit=True
                        )
                new = await within(_LOAD_TIMEOUT_S, self._builder.build(self._snapshot_conn))
            except _UNREACHABLE as exc:
                await self._drop_snapshot_connection()
                log.warning("snapshot_replica_unreachable", error=str(exc) or type(exc).__name__)
            else:
                SNAPSHOT_LOADS.labels("replica").inc()
                if new.version >= probed or not self.loaded:
                    self._replica_behind = 0
                    return new
                self._replica_behind += 1
                log.info("snapshot_replica_behind", replica=new.version, primary=probed)
                return None
        self._replica_behind = 0
        new = await within(_LOAD_TIMEOUT_S, self._builder.build(primary))
        SNAPSHOT_LOADS.labels("primary").inc()
        return new

    async def _drop_snapshot_connection(self) -> None:
        conn, self._snapshot_conn = self._snapshot_conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()

    @staticmethod
    def _built(stats: BuildStats, new: Snapshot) -> None:
        SNAPSHOT_BUILD.labels("full" if stats.full else "incremental").set(stats.seconds)
        SNAPSHOT_TOOLS_COMPILED.inc(stats.compiled)
        log.info(
            "snapshot_loaded",
            version=new.version,
            agents=len(new.agents),
            build_ms=round(stats.seconds * 1000, 1),
            compiled=stats.compiled,
            agents_rebuilt=stats.agents_rebuilt,
            key_groups_changed=stats.keys_changed,
        )

    async def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with contextlib.suppress(psycopg.Error, OSError):
                await conn.close()

    async def _poll(self) -> None:
        """Refresh; an unreachable database is noted (readiness) and raised."""
        try:
            await self.refresh()
        except _UNREACHABLE as exc:
            self._health.failed(exc, report=not self.loaded)
            raise

    async def _poll_once(self) -> None:
        """The first poll, before the loop starts: what went wrong is logged."""
        try:
            await self._poll()
        except _UNREACHABLE:
            pass  # logged by _poll; the loop retries soon
        except Exception:  # a bug in loading or swapping: the loop polls on, readiness decays
            log.exception("snapshot_refresh_failed")
