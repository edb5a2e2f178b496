"""Which key a bearer token is: from the snapshot, else one database look-up.

Look-ups of keys the snapshot does not know are bounded (unknown keys remembered,
one query per key at a time, the limits of mcp_gateway.catalog.lookup_limits), and
resolved tokens are remembered per snapshot (docs/architecture.md, "Keys").
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Callable
from datetime import datetime

import psycopg
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.catalog.lookup_limits import LookupLimits
from mcp_gateway.catalog.snapshot import Key, Snapshot
from mcp_gateway.upkeep.metrics import KEY_LOOKUPS
from shared.crypto import KeyHasher
from shared.db import Connection, within
from shared.keys import KeyKind, parse_key

NEGATIVE_TTL_S = 2.0
LOOKUP_TIMEOUT_S = 2.0
RETRY_AFTER_S = 2
_MAX_REMEMBERED = 10_000
_MAX_RESOLVED = 10_000
# What became of a token the snapshot did not know; the first three made a query.
LOOKUP_RESULTS = (
    "found",
    "not_found",
    "failed",  # the query failed or timed out (503)
    "remembered",  # a key found unknown within NEGATIVE_TTL_S (401)
    "joined",  # the same key's look-up was already running: its answer is shared
    "database_down",  # the refresher finds the database unreachable (503)
    "refused_address",  # the client address is past its look-up limit (401)
    "refused_busy",  # the process is past its look-up limit (503)
)
_counters = {result: KEY_LOOKUPS.labels(result) for result in LOOKUP_RESULTS}


class KeyLookupUnavailable(Exception):
    """The key is not in the snapshot and the database cannot be asked now;
    ``retry_after_s``: when asking again may help."""

    def __init__(self, retry_after_s: int = RETRY_AFTER_S) -> None:
        super().__init__(f"retry after {retry_after_s} s")
        self.retry_after_s = retry_after_s


class KeyResolver:
    """``resolve``: a live ``Key`` or None; raises KeyLookupUnavailable when it cannot tell."""

    def __init__(
        self,
        hasher: KeyHasher,
        pool: AsyncConnectionPool[Connection],
        *,
        database_reachable: Callable[[], bool] = lambda: True,
        limits: LookupLimits | None = None,
    ) -> None:
        self._hasher = hasher
        self._pool = pool
        self._database_reachable = database_reachable
        self._limits = limits or LookupLimits(None, None)
        self._fresh: dict[bytes, Key] = {}
        self._unknown: dict[bytes, float] = {}  # HMAC hash -> remembered unknown until
        self._running: dict[bytes, asyncio.Future[Key | None]] = {}  # HMAC hash -> look-up
        # SHA-256 of the token -> key, valid for ``_resolved_for`` only: a swap clears it
        # (docs/architecture.md, "Keys").
        self._resolved: dict[bytes, Key] = {}
        self._resolved_for: Snapshot | None = None

    def snapshot_swapped(self, snapshot: Snapshot) -> None:
        """The new snapshot holds every key created before it: forget the overlay."""
        self._fresh.clear()
        self._unknown.clear()
        self._resolved.clear()
        self._resolved_for = None

    async def resolve(self, token: str, snapshot: Snapshot, address: str = "") -> Key | None:
        """``address``: the client's, for the per-address look-up limit."""
        if snapshot is not self._resolved_for:  # also covers a caller holding an older one
            self._resolved.clear()
            self._resolved_for = snapshot
        token_hash = hashlib.sha256(token.encode()).digest()
        key = self._resolved.get(token_hash)
        if key is not None:
            return None if key.expired(time.time()) else key
        kind = parse_key(token)
        if kind not in (KeyKind.AGENT, KeyKind.APPROVAL):
            return None
        now = time.time()
        candidates = self._hasher.candidates(token)
        for digest in candidates:
            key = snapshot.keys.get(digest) or self._fresh.get(digest)
            if key is not None:
                # No await since the check above: this is still ``snapshot``'s memory.
                if len(self._resolved) >= _MAX_RESOLVED:
                    self._resolved.clear()
                self._resolved[token_hash] = key
                return None if key.expired(now) else key
        return await self._look_up_unknown(candidates, address)

    async def _look_up_unknown(self, candidates: list[bytes], address: str) -> Key | None:
        """A key the snapshot does not know, within the bounds of docs/architecture.md, "Keys":
        past the address's look-up limit None (401), past the process's KeyLookupUnavailable
        (503) with the time until the next look-up may run."""
        primary = candidates[0]
        if self._unknown.get(primary, 0.0) > time.monotonic():
            _counters["remembered"].inc()
            return None
        running = self._running.get(primary)
        if running is not None:
            _counters["joined"].inc()
            return await asyncio.shield(running)
        if not self._database_reachable():
            _counters["database_down"].inc()
            raise KeyLookupUnavailable  # fail fast instead of waiting for a pool that is down
        refusal = self._limits.take(address)
        if refusal is not None and refusal.reason == "address":
            _counters["refused_address"].inc()
            return None
        if refusal is not None:
            _counters["refused_busy"].inc()
            raise KeyLookupUnavailable(refusal.retry_after_s)
        lookup = asyncio.ensure_future(self._query(candidates))
        self._running[primary] = lookup
        lookup.add_done_callback(lambda done: self._finished(primary, done))
        return await asyncio.shield(lookup)  # a caller that goes away leaves it to the others

    def _finished(self, primary: bytes, lookup: asyncio.Future[Key | None]) -> None:
        if self._running.get(primary) is lookup:
            del self._running[primary]
        if not lookup.cancelled():
            lookup.exception()  # retrieved, even when every caller has gone away

    async def _query(self, candidates: list[bytes]) -> Key | None:
        """One look-up; the answer is remembered (a key until the next snapshot, an unknown
        one for ``NEGATIVE_TTL_S``)."""
        primary = candidates[0]
        try:
            key = await within(LOOKUP_TIMEOUT_S, self._look_up(candidates))
        except (psycopg.OperationalError, psycopg.InterfaceError, TimeoutError) as exc:
            # PoolTimeout is an OperationalError.
            _counters["failed"].inc()
            raise KeyLookupUnavailable from exc
        if key is None:
            _counters["not_found"].inc()
            if len(self._unknown) >= _MAX_REMEMBERED:
                self._unknown.clear()
            self._unknown[primary] = time.monotonic() + NEGATIVE_TTL_S
            return None
        _counters["found"].inc()
        if len(self._fresh) >= _MAX_REMEMBERED:
            self._fresh.clear()
        self._fresh[primary] = key
        return key

    async def _look_up(self, candidates: list[bytes]) -> Key | None:
        async with self._pool.connection(timeout=LOOKUP_TIMEOUT_S) as conn:
            cur = await conn.execute(
                """SELECT id, kind, agent_id, expires_at FROM api_keys
                    WHERE hash = ANY(%s) AND revoked_at IS NULL
                      AND (expires_at IS NULL OR expires_at > now())""",
                (candidates,),
            )
            row = await cur.fetchone()
        if row is None:
            return None
        expires: datetime | None = row["expires_at"]
        return Key(
            id=row["id"],
            kind=row["kind"],
            agent_id=row["agent_id"],
            expires_at=None if expires is None else expires.timestamp(),
        )
