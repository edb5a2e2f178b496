"""Which key a bearer token is: from the snapshot, else one database look-up.

A key created a moment ago is not in the snapshot yet; the first request
with it looks it up once and keeps it until the next snapshot (which then
holds it). Unknown keys are remembered briefly, so a flood of wrong keys
costs one query per distinct key per ``NEGATIVE_TTL_S``.
"""

from __future__ import annotations

import time
from datetime import datetime

from psycopg_pool import AsyncConnectionPool

from mcp_gateway.snapshot import Key, Snapshot
from shared.crypto import KeyHasher
from shared.db import Connection
from shared.keys import KeyKind, parse_key

NEGATIVE_TTL_S = 2.0
_MAX_REMEMBERED = 10_000


class KeyResolver:
    def __init__(self, hasher: KeyHasher, pool: AsyncConnectionPool[Connection]) -> None:
        self._hasher = hasher
        self._pool = pool
        self._fresh: dict[bytes, Key] = {}
        self._unknown: dict[bytes, float] = {}

    def snapshot_swapped(self, snapshot: Snapshot) -> None:
        """The new snapshot holds every key created before it: forget the overlay."""
        self._fresh.clear()
        self._unknown.clear()

    async def resolve(self, token: str, snapshot: Snapshot) -> Key | None:
        kind = parse_key(token)
        if kind not in (KeyKind.AGENT, KeyKind.APPROVAL):
            return None
        now = time.time()
        candidates = self._hasher.candidates(token)
        for digest in candidates:
            key = snapshot.keys.get(digest) or self._fresh.get(digest)
            if key is not None:
                return None if key.expired(now) else key
        primary = candidates[0]
        if self._unknown.get(primary, 0.0) > time.monotonic():
            return None
        key = await self._look_up(candidates)
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
        async with self._pool.connection() as conn:
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
