"""The secrets service under concurrency: one upsert statement, no retry loop."""

from __future__ import annotations

import asyncio

import pytest

from control_plane.auth import Role, Workspace
from control_plane.services.secrets import set_secret
from shared.crypto import SecretBox
from shared.db import Connection, connect
from tests.conftest import TEST_SECRET_KEY


@pytest.fixture
async def ws(database_url: str) -> Workspace:
    async with await connect(database_url) as conn:
        cur = await conn.execute("INSERT INTO workspaces (slug) VALUES ('acme') RETURNING id")
        row = await cur.fetchone()
        assert row is not None
        await conn.commit()
    return Workspace(id=row["id"], slug="acme", title="", role=Role.EDITOR)


async def wait_until_blocked(watcher: Connection, pid: int) -> None:
    """Until backend ``pid`` waits on a lock; bounded to two seconds."""
    for _ in range(200):
        cur = await watcher.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        )
        row = await cur.fetchone()
        if row is not None and row["wait_event_type"] == "Lock":
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"backend {pid} never waited on a lock")


async def test_two_writers_creating_the_same_secret_make_one_row_and_both_succeed(
    database_url: str, ws: Workspace
) -> None:
    box = SecretBox(TEST_SECRET_KEY)
    async with (
        await connect(database_url) as first,
        await connect(database_url) as second,
        await connect(database_url, autocommit=True) as watcher,
    ):
        won = await set_secret(first, box, ws, "first", "KEY", "one")  # inserted, uncommitted
        waiting = asyncio.create_task(set_secret(second, box, ws, "second", "KEY", "two"))
        await wait_until_blocked(watcher, second.info.backend_pid)
        await first.commit()
        lost = await asyncio.wait_for(waiting, timeout=5)
        await second.commit()
        cur = await watcher.execute("SELECT count(*) AS n FROM secrets")
        assert await cur.fetchone() == {"n": 1}
    assert (won.created, lost.created) == (True, False)
    assert lost.view.created_at == won.view.created_at
