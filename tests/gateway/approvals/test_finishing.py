"""Finishing approved calls in batches (mcp_gateway.approvals.finishing) against the
real database: outcomes that wait together go in one statement, each row is
fenced on its own claim inside the batch, and a failed flush fails every
finish in it while the next one writes. A worker finishing many calls at
once: tests/gateway/approvals/test_worker.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals import store
from mcp_gateway.approvals.finishing import Finisher
from mcp_gateway.approvals.store import Claimed, Finish
from shared.db import Connection, connect, open_pool
from tests.support.api import Client
from tests.support.approvals import (
    Shop,
    execute,
    expire_lease,
    fetch,
    insert_approved,
    publish_shop,
)


@asynccontextmanager
async def pool_for(database_url: str) -> AsyncIterator[AsyncConnectionPool[Connection]]:
    pool = await open_pool(database_url, autocommit=True, max_size=2, name="finishing")
    try:
        yield pool
    finally:
        await pool.close()


async def claim(database_url: str, owner: str, limit: int) -> list[Claimed]:
    async with await connect(database_url, autocommit=True) as conn:
        running, failed = await store.claim(
            conn, owner=owner, limit=limit, margin_s=10, exhausted={}
        )
    assert failed == []
    return running


def done(row: Claimed, payload: Any) -> Finish:
    return Finish(row, "completed", payload)


async def test_finishes_that_wait_together_go_in_one_statement(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    await insert_approved(database_url, 5)
    rows = await claim(database_url, "worker-a", 5)
    async with pool_for(database_url) as pool:
        finisher = Finisher(pool, "worker-a")
        written = await asyncio.gather(
            *(finisher.finish(done(row, {"id": f"ord-{i}"})) for i, row in enumerate(rows))
        )
    assert written == [True] * 5
    assert finisher.flushes == 1
    for i, row in enumerate(rows):
        finished = await fetch(database_url, row.id)
        assert (finished["status"], finished["attempt"]) == ("completed", 1)
        assert finished["response_payload"] == {"id": f"ord-{i}"}
        assert finished["lease_owner"] == "worker-a"
        assert finished["lease_expires_at"] is None


async def test_a_batch_writes_only_the_rows_its_claims_still_hold(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    await insert_approved(database_url, 2)
    lost, kept = await claim(database_url, "worker-a", 2)
    await expire_lease(database_url, lost.id)
    (retaken,) = await claim(database_url, "worker-b", 1)
    assert (retaken.id, retaken.attempt) == (lost.id, 2)
    async with pool_for(database_url) as pool:
        finisher = Finisher(pool, "worker-a")
        written = await asyncio.gather(
            finisher.finish(done(lost, {"id": "stale"})),
            finisher.finish(Finish(kept, "failed", {"error_code": "upstream_error"})),
        )
    assert list(written) == [False, True]
    assert finisher.flushes == 1
    row = await fetch(database_url, lost.id)
    assert (row["status"], row["attempt"], row["lease_owner"]) == ("executing", 2, "worker-b")
    assert row["response_payload"] is None
    row = await fetch(database_url, kept.id)
    assert (row["status"], row["response_payload"]) == ("failed", {"error_code": "upstream_error"})
    # The same (id, attempt) fence holds for the other owner's own finish.
    async with await connect(database_url, autocommit=True) as conn:
        assert await store.finish(conn, lost, "worker-b", "completed", {"id": "x"}) is False
        assert await store.finish(conn, retaken, "worker-b", "completed", {"id": "ord-2"})


async def test_a_failed_flush_fails_every_finish_in_it_and_the_next_flush_writes(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    await insert_approved(database_url, 2)
    rows = await claim(database_url, "worker-a", 2)
    async with pool_for(database_url) as pool:
        finisher = Finisher(pool, "worker-a")
        await execute(database_url, "ALTER TABLE approvals RENAME TO approvals_away")
        try:
            results = await asyncio.gather(
                *(finisher.finish(done(row, {"id": row.id})) for row in rows),
                return_exceptions=True,
            )
        finally:
            await execute(database_url, "ALTER TABLE approvals_away RENAME TO approvals")
        assert all(isinstance(result, psycopg.Error) for result in results)
        for row in rows:
            assert (await fetch(database_url, row.id))["status"] == "executing"
        assert await asyncio.gather(*(finisher.finish(done(row, {"id": row.id})) for row in rows))
    for row in rows:
        assert (await fetch(database_url, row.id))["response_payload"] == {"id": row.id}
