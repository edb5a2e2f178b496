"""The catalog version: one bump and one notification per transaction, however many changes."""

from __future__ import annotations

import asyncio

import pytest

from control_plane.services.catalog import bump_catalog
from shared.db import Connection, connect


async def _version(conn: Connection) -> int:
    cur = await conn.execute("SELECT version FROM catalog_state")
    row = await cur.fetchone()
    assert row is not None
    return int(row["version"])


async def _notifications(listener: Connection) -> list[str]:
    """What arrived on crank_catalog, waiting at most half a second for more."""
    return [n.payload async for n in listener.notifies(timeout=0.5)]


async def test_a_transaction_bumps_the_catalog_once_and_notifies_once(database_url: str) -> None:
    async with (
        await connect(database_url, autocommit=True) as listener,
        await connect(database_url) as conn,
    ):
        await listener.execute("LISTEN crank_catalog")
        before = await _version(conn)
        first = await bump_catalog(conn)
        again = await bump_catalog(conn)
        third = await bump_catalog(conn)
        await conn.commit()
        assert first == again == third == before + 1
        assert await _version(conn) == before + 1
        assert await _notifications(listener) == [str(before + 1)]

        assert await bump_catalog(conn) == before + 2  # the next transaction bumps again
        await conn.commit()
        assert await _notifications(listener) == [str(before + 2)]


async def test_a_rolled_back_savepoint_takes_its_bump_and_notification_with_it(
    database_url: str,
) -> None:
    async with (
        await connect(database_url, autocommit=True) as listener,
        await connect(database_url) as conn,
    ):
        await listener.execute("LISTEN crank_catalog")
        before = await _version(conn)
        async with conn.transaction(force_rollback=True):
            assert await bump_catalog(conn) == before + 1
        assert await bump_catalog(conn) == before + 1  # bumps again: the first one is gone
        await conn.commit()
        assert await _version(conn) == before + 1
        assert await _notifications(listener) == [str(before + 1)]


async def test_a_transaction_waiting_on_another_bump_still_bumps_after_it(
    database_url: str,
) -> None:
    async with (
        await connect(database_url) as first,
        await connect(database_url) as second,
        await connect(database_url, autocommit=True) as watcher,
    ):
        before = await _version(first)
        await second.execute("SELECT 1")  # second's transaction is open before first commits
        assert await bump_catalog(first) == before + 1  # holds the row lock
        waiting = asyncio.create_task(bump_catalog(second))
        for _ in range(200):  # bounded: two seconds
            cur = await watcher.execute(
                "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                (second.info.backend_pid,),
            )
            row = await cur.fetchone()
            if row is not None and row["wait_event_type"] == "Lock":
                break
            await asyncio.sleep(0.01)
        else:
            pytest.fail("the second bump never waited for the first")
        await first.commit()
        assert await asyncio.wait_for(waiting, timeout=5) == before + 2
        await second.commit()
        assert await _version(second) == before + 2
