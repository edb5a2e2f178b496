"""Waking the workers after decisions (mcp_gateway.approvals.wakeups) against the
real database: this process's worker at once for every decision, and the
other replicas by one NOTIFY for all the decisions made while one was under way."""

from __future__ import annotations

import asyncio

from mcp_gateway.approvals import store
from mcp_gateway.approvals.wakeups import Wakeups
from shared.db import connect, open_pool


async def test_decisions_made_together_wake_here_each_time_and_the_others_by_one_notify(
    database_url: str,
) -> None:
    local: list[None] = []
    pool = await open_pool(database_url, autocommit=True, max_size=2, name="wakeups")
    try:
        async with await connect(database_url, autocommit=True) as listener:
            await listener.execute(f"LISTEN {store.CHANNEL}")
            wakeups = Wakeups(pool, lambda: local.append(None))
            for _ in range(5):
                wakeups.approved()
            assert len(local) == 5  # this process's worker: at once, no round trip
            first = [n.channel async for n in listener.notifies(timeout=2, stop_after=2)]
            assert first == [store.CHANNEL]
            assert wakeups.sent == 1
            wakeups.approved()  # a later decision: a NOTIFY of its own
            later = [n.channel async for n in listener.notifies(timeout=2, stop_after=2)]
            assert later == [store.CHANNEL]
            assert wakeups.sent == 2
            await wakeups.stop()
    finally:
        await pool.close()


async def test_a_notify_the_database_refuses_is_logged_and_the_next_decision_sends_again(
    database_url: str,
) -> None:
    pool = await open_pool(database_url, autocommit=True, max_size=1, name="wakeups")
    try:
        wakeups = Wakeups(pool, lambda: None, timeout_s=0.2)
        async with pool.connection() as held:  # the only connection: the NOTIFY times out
            wakeups.approved()
            await asyncio.sleep(0.5)
            await held.execute("SELECT 1")
        async with await connect(database_url, autocommit=True) as listener:
            await listener.execute(f"LISTEN {store.CHANNEL}")
            wakeups.approved()
            got = [n.channel async for n in listener.notifies(timeout=2, stop_after=1)]
        assert got == [store.CHANNEL]
        assert wakeups.sent == 2
        await wakeups.stop()
    finally:
        await pool.close()
