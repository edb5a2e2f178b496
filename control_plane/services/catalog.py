"""The catalog version gateways watch; bumped with every change they must see."""

from __future__ import annotations

from shared.db import Connection


async def bump_catalog(conn: Connection) -> int:
    """Bump the version and NOTIFY; both take effect when the transaction commits."""
    cur = await conn.execute("SELECT crank_bump_catalog() AS version")
    row = await cur.fetchone()
    assert row is not None
    return int(row["version"])
