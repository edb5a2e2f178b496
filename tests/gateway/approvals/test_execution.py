"""Approved calls run by real gateway processes (granian, two at a time):
exactly once over many rows, a SIGKILL during the upstream call recovered
by the other process with the same idempotency key, and a SIGTERM that hands
a running call back to a gateway that only polls."""

from __future__ import annotations

import asyncio
import os
import signal
from collections import Counter
from pathlib import Path

from mcp_gateway.approvals import store
from shared.db import connect
from tests.support.api import Client
from tests.support.approvals import (
    Shop,
    execute,
    expire_lease,
    fetch,
    insert_approved,
    owner_pid,
    publish_shop,
    runs_in,
    status_is,
)
from tests.support.gateway import Gateway, run_gateway, wait_until


def gateway_env(shop: Shop, **extra: str) -> dict[str, str]:
    return {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{shop.port}", **extra}


async def exited(gateway: Gateway, timeout_s: float) -> int:
    code = await asyncio.to_thread(gateway.process.wait, timeout_s)
    return int(code)


async def test_two_gateways_send_each_of_500_approved_calls_exactly_once(
    client: Client, admin_token: str, database_url: str, tmp_path: Path, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    env = gateway_env(shop, CRANK_APPROVAL_WORKERS="32")
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as first,
        run_gateway(database_url, tmp_path, extra_env=env) as second,
    ):
        ids = await insert_approved(database_url, 500, notify=True)

        async def all_completed() -> bool:
            async with await connect(database_url, autocommit=True) as conn:
                cur = await conn.execute(
                    "SELECT count(*) AS n FROM approvals WHERE status = 'completed'"
                )
                row = await cur.fetchone()
            return row is not None and row["n"] == 500

        await wait_until(all_completed, timeout_s=30, interval_s=0.2)
        async with await connect(database_url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT lease_owner, count(*) AS n, max(attempt) AS attempts "
                "FROM approvals GROUP BY lease_owner"
            )
            owners = await cur.fetchall()
    assert "Traceback" not in first.log() + second.log()
    keys = Counter(seen.key for seen in shop.seen)
    assert len(keys) == 500
    assert set(keys.values()) == {1}  # every approval's request reached the upstream once
    assert set(keys) == {f"req-{int(i.removeprefix('approval_'), 16)}" for i in ids}
    assert len(owners) == 2  # both processes took a share
    assert {row["attempts"] for row in owners} == {1}


async def test_a_killed_gateway_leaves_a_lease_another_gateway_reclaims_and_finishes(
    client: Client, admin_token: str, database_url: str, tmp_path: Path, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    shop.hold = 1  # the first request waits until the process holding it is gone
    async with run_gateway(database_url, tmp_path, extra_env=gateway_env(shop)) as doomed:
        (approval_id,) = await insert_approved(database_url, notify=True)
        await asyncio.wait_for(shop.entered.wait(), 10)
        claimed = await fetch(database_url, approval_id)
        assert (claimed["status"], claimed["attempt"]) == ("executing", 1)
        assert runs_in(doomed, await owner_pid(database_url, approval_id))
        os.killpg(doomed.process.pid, signal.SIGKILL)
        await exited(doomed, 10)

    async def upstream_saw_the_drop() -> bool:
        return shop.cancelled == 1

    await wait_until(upstream_saw_the_drop, timeout_s=5)
    async with run_gateway(database_url, tmp_path, extra_env=gateway_env(shop)) as survivor:
        # The killed process left its lease; expire it instead of waiting it out.
        assert await status_is(database_url, approval_id, "executing")
        await expire_lease(database_url, approval_id)
        await execute(database_url, f"NOTIFY {store.CHANNEL}")
        await wait_until(lambda: status_is(database_url, approval_id, "completed"), 10)
        finished = await fetch(database_url, approval_id)
        assert finished["attempt"] == 2
        assert runs_in(survivor, await owner_pid(database_url, approval_id))
    assert finished["response_payload"] == {"id": "ord-2", "item": shop.seen[0].body["item"]}
    # Both attempts carried the same idempotency key: the upstream can drop the repeat.
    assert len(shop.seen) == 2
    assert shop.seen[0].key == shop.seen[1].key
    assert shop.seen[0].key is not None


async def test_sigterm_hands_a_running_call_back_to_a_gateway_that_only_polls(
    client: Client, admin_token: str, database_url: str, tmp_path: Path, shop: Shop
) -> None:
    # A timeout far beyond the test: the held call must still run when the grace ends
    # (with 5 s, a slow start of the second gateway let it time out first).
    await publish_shop(client, admin_token, shop.port, timeout_ms=60_000)
    shop.hold = 1  # held past the grace period
    leaving_env = gateway_env(shop, CRANK_APPROVAL_SHUTDOWN_GRACE_S="1")
    polling_env = gateway_env(shop, CRANK_MCP_LISTEN="false")
    async with run_gateway(database_url, tmp_path, extra_env=leaving_env) as leaving:
        (approval_id,) = await insert_approved(database_url, notify=True)
        await asyncio.wait_for(shop.entered.wait(), 10)
        assert runs_in(leaving, await owner_pid(database_url, approval_id))
        async with run_gateway(database_url, tmp_path, extra_env=polling_env) as polling:
            os.killpg(leaving.process.pid, signal.SIGTERM)
            assert await exited(leaving, 15) == 0
            assert "approval_released" in leaving.log()
            # No notification reaches the polling gateway; its poll finds the row.
            await wait_until(lambda: status_is(database_url, approval_id, "completed"), 10)
            finished = await fetch(database_url, approval_id)
            assert runs_in(polling, await owner_pid(database_url, approval_id))
    assert finished["attempt"] == 2  # the released attempt counted
    assert shop.cancelled == 1
    assert [seen.key for seen in shop.seen] == [shop.seen[0].key] * 2
