"""Keeps the snapshot and the session termination list current.

Every ``CRANK_MCP_REFRESH_MS`` one tiny query reads the catalog version and the
newest termination id; only a change costs more, and a change costs what it
changed (mcp_gateway.catalog.builder; docs/architecture.md, "Snapshot and refresh"). LISTEN wakes the loop at
once on a publish or a session DELETE; polling alone still works (behind
PgBouncer, or while the listening connection is down). The same connection
listens for others (``notify``: the approval worker's ``crank_approvals``).

Postgres outages. The refresher polls on a connection of its own, not one
from the request pool, so that it notices an outage at the first failed poll
and a recovery at the first good one, whatever the pool is doing. While polls
fail, the last snapshot keeps serving, ``database_reachable`` and ``ready``
are false (``/readyz`` answers 503 ``degraded``) and polls are retried every
``_RETRY_MAX_S`` at most; the first poll that succeeds ends the outage. The
LISTEN connection reconnects by itself with a backoff, proves that it is alive
with a ``SELECT 1`` whenever it has been quiet for ``_LISTEN_CHECK_S`` (a peer
that vanished without a FIN never errors otherwise), and on reconnecting wakes
the poll, so a publish made during the outage shows at once.

Snapshot loads from a read replica (``CRANK_SNAPSHOT_DATABASE_URL``; docs/architecture.md,
"Snapshot loads from a read replica"). Only the load, the one large read, goes
there, on a connection of its own; the version probe, session terminations,
LISTEN and everything else stay on the primary. A replica that lags behind
gives a snapshot older than the version the primary reported: it is dropped
and the next poll tries again, and after ``_REPLICA_PATIENCE`` such loads in a
row one load reads the primary, so a replica stuck behind delays a publish by
a few polls at most. A replica that cannot be reached does not stop the
refresh either: that load reads the primary, and
``crank_snapshot_loads_total{source="primary"}`` says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
import structlog
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from mcp_gateway.catalog.builder import BuildStats, SnapshotBuilder
from mcp_gateway.catalog.snapshot import Snapshot, SnapshotOptions
from mcp_gateway.upkeep.metrics import SNAPSHOT_BUILD, SNAPSHOT_LOADS, SNAPSHOT_TOOLS_COMPILED
from shared.db import Connection, connect, within
from shared.metrics import BACKGROUND_FAILURES
from shared.periodic import PeriodicTask

log = structlog.get_logger(__name__)

CHANNELS = ("crank_catalog", "crank_sessions")
# Connecting plus the version query, and a whole snapshot load, may take this long.
_PROBE_TIMEOUT_S = 5.0
_LOAD_TIMEOUT_S = 30.0
# While the database is unreachable, polls are retried at least this often.
_RETRY_MIN_S, _RETRY_MAX_S = 0.25, 2.0
_LISTEN_CHECK_S = 30.0
_LISTEN_BACKOFF_MAX_S = 5.0
# A replica behind the primary this many loads in a row: the next load reads the primary.
_REPLICA_PATIENCE = 3
_LISTEN_FAILURES = BACKGROUND_FAILURES.labels("snapshot_listen")

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


_PROBE_SQL = """SELECT (SELECT version FROM catalog_state) AS version,
                       (SELECT coalesce(max(id), 0) FROM mcp_session_terminations) AS ended"""
_TERMINATIONS_SQL = """SELECT id, session_hash, extract(epoch FROM expires_at) AS expires
                         FROM mcp_session_terminations
                        WHERE id > %s AND expires_at > now() ORDER BY id"""


async def _fetch_one(conn: Connection, sql: str) -> dict[str, Any] | None:
    cur = await conn.execute(sql)
    return await cur.fetchone()


async def _fetch_all(conn: Connection, sql: str, *params: Any) -> list[dict[str, Any]]:
    cur = await conn.execute(sql, params)
    return await cur.fetchall()


def resilient_conninfo(database_url: str) -> str:
    """``database_url`` plus a connect timeout and TCP keepalives, unless it sets them."""
    given = conninfo_to_dict(database_url)
    extra = {name: value for name, value in _CONNECT_DEFAULTS.items() if name not in given}
    if "PGCONNECT_TIMEOUT" in os.environ:
        extra.pop("connect_timeout", None)
    return make_conninfo(database_url, **extra)


class Refresher:
    """Keeps ``snapshot`` and ended sessions (``terminated``) current; ``on_swap`` per swap."""

    def __init__(
        self,
        conninfo: str,
        *,
        refresh_s: float,
        listen: bool,
        on_swap: Callable[[Snapshot, Snapshot], None],
        options: SnapshotOptions | None = None,
        notify: Mapping[str, Callable[[str | None], None]] | None = None,
        snapshot_conninfo: str | None = None,
    ) -> None:
        self._conninfo = conninfo
        # Where snapshots are loaded from when it is not the primary (a read replica).
        self._snapshot_conninfo = snapshot_conninfo
        self._snapshot_conn: Connection | None = None
        self._replica_behind = 0  # loads in a row the replica had not caught up for
        # More channels to LISTEN on: each notification calls its callback with the
        # payload instead of waking the poll; each reconnect calls it with None
        # (anything may have been missed).
        self._notify = dict(notify or {})
        self._refresh_s = refresh_s
        self._listen = listen
        self._on_swap = on_swap
        self._builder = SnapshotBuilder(options)
        # The poll repeats in the shared loop (shared.periodic): while the database
        # is unreachable it retries sooner than the interval, from _RETRY_MIN_S
        # doubling to _RETRY_MAX_S. The LISTEN connection is one long wait, not
        # a periodic run: it keeps its own loop and reconnect backoff below.
        self._poller = PeriodicTask(
            "snapshot_poll",
            self._poll,
            interval_s=refresh_s,
            retry_s=min(_RETRY_MIN_S, refresh_s),
            retry_max_s=min(_RETRY_MAX_S, refresh_s),
            expected=_UNREACHABLE,
        )
        self._listener: asyncio.Task[None] | None = None
        self._conn: Connection | None = None  # the poll's own connection
        self._last_termination_id = 0
        self.snapshot = Snapshot.empty()
        self.terminated: dict[bytes, float] = {}  # session hash -> its expiry (unix time)
        self.loaded = False
        self.last_success = 0.0  # time.monotonic() of the last good poll
        self.database_reachable = False  # the last poll reached the database
        self.listening = False

    @property
    def ready(self) -> bool:
        """Loaded, the last poll reached the database, and it did so within three intervals."""
        return (
            self.loaded
            and self.database_reachable
            and time.monotonic() - self.last_success < 3 * self._refresh_s + 1
        )

    def wake(self) -> None:
        """Poll now."""
        self._poller.wake()

    def note_termination(self, digest: bytes, expires_at: float) -> None:
        """This replica ended a session: refuse it here without waiting for the poll."""
        self.terminated[digest] = expires_at

    async def start(self) -> None:
        await self._poll_once()
        self._poller.start(
            first_delay_s=self._refresh_s if self.database_reachable else _RETRY_MIN_S
        )
        if self._listen:
            self._listener = asyncio.create_task(self._listen_loop(), name="snapshot-listen")

    async def stop(self) -> None:
        await self._poller.stop()
        if self._listener is not None:
            self._listener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._listener
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
        self.last_success = time.monotonic()
        if not self.database_reachable:
            self.database_reachable = True
            log.info("database_reachable", snapshot_version=self.snapshot.version)

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
        if row["ended"] > self._last_termination_id:
            rows = await within(
                _LOAD_TIMEOUT_S, _fetch_all(conn, _TERMINATIONS_SQL, self._last_termination_id)
            )
            for ended in rows:
                self.terminated[bytes(ended["session_hash"])] = float(ended["expires"])
            self._last_termination_id = row["ended"]
        now = time.time()
        for digest in [d for d, expires in self.terminated.items() if expires <= now]:
            del self.terminated[digest]

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
            if self.database_reachable or not self.loaded:
                log.warning("database_unreachable", error=str(exc) or type(exc).__name__)
            self.database_reachable = False
            raise

    async def _poll_once(self) -> None:
        """The first poll, before the loop starts: what went wrong is logged."""
        try:
            await self._poll()
        except _UNREACHABLE:
            pass  # logged by _poll; the loop retries soon
        except Exception:  # a bug in loading or swapping: the loop polls on, readiness decays
            log.exception("snapshot_refresh_failed")

    def _dispatch(self, channel: str, payload: str) -> None:
        callback = self._notify.get(channel)
        if callback is None:
            self.wake()
        else:
            callback(payload)

    async def _listen_loop(self) -> None:
        backoff = 0.5
        while True:
            try:
                async with await connect(self._conninfo, autocommit=True) as conn:
                    for channel in (*CHANNELS, *self._notify):
                        await conn.execute(f"LISTEN {channel}")
                    self.listening = True
                    backoff = 0.5
                    self.wake()  # anything missed while not listening
                    for callback in self._notify.values():
                        callback(None)
                    while True:
                        async for note in conn.notifies(timeout=_LISTEN_CHECK_S):
                            self._dispatch(note.channel, note.payload)
                        await within(_PROBE_TIMEOUT_S, conn.execute("SELECT 1"))
            except _UNREACHABLE as exc:
                _LISTEN_FAILURES.inc()
                if self.listening:
                    log.warning("snapshot_listen_lost", error=str(exc) or type(exc).__name__)
            except Exception:
                _LISTEN_FAILURES.inc()
                log.exception("snapshot_listen_failed")
            if self.listening:
                self.listening = False
                self.wake()  # let the poll find out whether the database is gone
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, _LISTEN_BACKOFF_MAX_S)
