"""Workspace ``acme``, made straight in the database, as the services tests take it."""

from __future__ import annotations

import pytest

from control_plane.auth import Role, Workspace
from shared.db import connect


@pytest.fixture
async def ws(database_url: str) -> Workspace:
    async with await connect(database_url) as conn:
        cur = await conn.execute("INSERT INTO workspaces (slug) VALUES ('acme') RETURNING id")
        row = await cur.fetchone()
        assert row is not None
        await conn.commit()
    return Workspace(id=row["id"], slug="acme", title="", role=Role.EDITOR)
