"""Workspace ``acme``: made straight in the database (``ws``), or through the API by an
instance admin (``acme``, whose value is that admin's token)."""

from __future__ import annotations

import pytest

from control_plane.auth import Role, Workspace
from shared.db import connect
from tests.support.api import Client, auth


@pytest.fixture
async def ws(database_url: str) -> Workspace:
    async with await connect(database_url) as conn:
        cur = await conn.execute("INSERT INTO workspaces (slug) VALUES ('acme') RETURNING id")
        row = await cur.fetchone()
        assert row is not None
        await conn.commit()
    return Workspace(id=row["id"], slug="acme", title="", role=Role.EDITOR)


@pytest.fixture
async def acme(client: Client, admin_token: str) -> str:
    response = await client.post(
        "/api/v1/workspaces", json={"slug": "acme"}, headers=auth(admin_token)
    )
    assert response.status_code == 201, response.text
    return admin_token
