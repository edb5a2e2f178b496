"""Which key a bearer token is: from the snapshot, else one database look-up.

A key created a moment ago is not in the snapshot yet; the first request
with it looks it up once and keeps it until the next snapshot (which then
holds it). Unknown keys are remembered briefly, so a flood of wrong keys
costs one query per distinct key per ``NEGATIVE_TTL_S``.

When that look-up cannot be made (the refresher finds the database
unreachable, or the query does not answer within ``LOOKUP_TIMEOUT_S``),
``resolve`` raises ``KeyLookupUnavailable`` and the endpoint answers 503 with
``Retry-After``, never 401: the gateway cannot tell a key created during the
outage from a wrong one, and a 401 tells a client to give up on its key. Keys
in the snapshot keep working through an outage.

Hot path: a token already resolved against the current snapshot is
remembered (raw token → ``Key``, bounded) so that a repeat request skips the
checksum and the HMAC. The memory belongs to one snapshot object: a swap
clears it, so a key revoked by a publish stops working at the same swap as
before, and expiry is still checked against the clock on every request.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

import psycopg
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.catalog.snapshot import Key, Snapshot
from shared.crypto import KeyHasher
from shared.db import Connection, within
from shared.keys import KeyKind, parse_key

NEGATIVE_TTL_S = 2.0
LOOKUP_TIMEOUT_S = 2.0
RETRY_AFTER_S = 2
_MAX_REMEMBERED = 10_000
_MAX_RESOLVED = 10_000


class KeyLookupUnavailable(Exception):
    """The key is not in the snapshot and the database cannot be asked now."""


class KeyResolver:
    """``resolve``: a live ``Key`` or None; raises KeyLookupUnavailable when it cannot tell."""

    def __init__(
        self,
        hasher: KeyHasher,
        pool: AsyncConnectionPool[Connection],
        *,
        database_reachable: Callable[[], bool] = lambda: True,
    ) -> None:
        self._hasher = hasher
        self._pool = pool
        self._database_reachable = database_reachable
        self._fresh: dict[bytes, Key] = {}
        self._unknown: dict[bytes, float] = {}
        # Raw token -> key, valid for ``_resolved_for`` only (see the module docstring).
        self._resolved: dict[str, Key] = {}
        self._resolved_for: Snapshot | None = None

    def snapshot_swapped(self, snapshot: Snapshot) -> None:
        """The new snapshot holds every key created before it: forget the overlay."""
        self._fresh.clear()
        self._unknown.clear()
        self._resolved.clear()
        self._resolved_for = None

    async def resolve(self, token: str, snapshot: Snapshot) -> Key | None:
        if snapshot is not self._resolved_for:  # also covers a caller holding an older one
            self._resolved.clear()
            self._resolved_for = snapshot
        key = self._resolved.get(token)
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
                self._resolved[token] = key
                return None if key.expired(now) else key
        primary = candidates[0]
        if self._unknown.get(primary, 0.0) > time.monotonic():
            return None
        if not self._database_reachable():
            raise KeyLookupUnavailable  # fail fast instead of waiting for a pool that is down
        try:
            key = await within(LOOKUP_TIMEOUT_S, self._look_up(candidates))
        except (psycopg.OperationalError, psycopg.InterfaceError, TimeoutError) as exc:
            # PoolTimeout is an OperationalError.
            raise KeyLookupUnavailable from exc
        if key is None:
            if len(self._unknown) >= _MAX_REMEMBERED:
                self._unknown.clear()
            self._unknown[primary] = time.monotonic() + NEGATIVE_TTL_S
            return None
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
