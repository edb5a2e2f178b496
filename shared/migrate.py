"""Apply the numbered SQL files in ``migrations/`` under an advisory lock.

Concurrent ``crank migrate`` runs (several replicas starting at once) queue on
the lock; the first applies what is missing, the rest find nothing to do.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import resources

import structlog

from shared.db import connect

log = structlog.get_logger(__name__)

# Any fixed 64-bit number; it only has to be the same in every Crank process.
MIGRATION_LOCK_ID = 0x6372616E6B_01  # "crank" + 1

_FILENAME = re.compile(r"(\d{4})_([a-z0-9_]+)\.sql")  # fullmatch


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str = field(repr=False)


def available_migrations() -> list[Migration]:
    found: list[Migration] = []
    for entry in resources.files("migrations").iterdir():
        match = _FILENAME.fullmatch(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"two migrations share a number: {versions}")
    return found


async def migrate(conninfo: str) -> list[Migration]:
    """Apply pending migrations; return the ones this call applied."""
    applied_now: list[Migration] = []
    async with await connect(conninfo, autocommit=True) as conn:
        await conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_ID,))
        try:
            await conn.execute(
                """CREATE TABLE IF NOT EXISTS crank_schema_migrations (
                       version     integer PRIMARY KEY,
                       name        text NOT NULL,
                       applied_at  timestamptz NOT NULL DEFAULT now())"""
            )
            cur = await conn.execute("SELECT version FROM crank_schema_migrations")
            done = {row["version"] for row in await cur.fetchall()}
            for migration in available_migrations():
                if migration.version in done:
                    continue
                async with conn.transaction():
                    await conn.execute(migration.sql.encode())
                    await conn.execute(
                        "INSERT INTO crank_schema_migrations (version, name) VALUES (%s, %s)",
                        (migration.version, migration.name),
                    )
                log.info("migration_applied", version=migration.version, name=migration.name)
                applied_now.append(migration)
        finally:
            await conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK_ID,))
    return applied_now
