"""The secrets service under concurrency: one upsert statement, no retry loop."""

from __future__ import annotations

import asyncio

from control_plane.auth import Workspace
from control_plane.services.secrets import set_secret
from shared.crypto import SecretBox
from shared.db import connect
from tests.support.db import TEST_SECRET_KEY, wait_until_blocked


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
