"""Retention: old call log and audit rows and expired session ends are pruned,
in batches, by one process at a time."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from mcp_gateway import retention
from mcp_gateway.retention import prune_once
from shared.db import Connection, open_pool
from shared.settings import Settings


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool[Connection]]:
    opened = await open_pool(database_url, max_size=3, autocommit=True)
    try:
        yield opened
    finally:
        await opened.close()


async def seed(pool: AsyncConnectionPool[Connection]) -> None:
    async with pool.connection() as conn:
        for days_ago in (1, 29, 31, 400):
            await conn.execute(
                """INSERT INTO call_log (called_at, workspace_id, agent_id, key_id, request_id,
                                         tool, outcome, duration_ms)
                   VALUES (now() - make_interval(days => %s), 1, 1, 1, 'req_x', 't', 'ok', 1)""",
                (days_ago,),
            )
            await conn.execute(
                """INSERT INTO audit_log (at, actor, action, resource_type)
                   VALUES (now() - make_interval(days => %s), 'a', 'x', 'y')""",
                (days_ago,),
            )
        for hours in (-1, 1):  # one expired an hour ago, one expires in an hour
            await conn.execute(
                """INSERT INTO mcp_session_terminations (session_hash, expires_at)
                   VALUES (%s, now() + make_interval(hours => %s))""",
                (str(hours).encode(), hours),
            )


async def counts(pool: AsyncConnectionPool[Connection]) -> dict[str, int]:
    async with pool.connection() as conn:
        row: Any = await (
            await conn.execute(
                """SELECT (SELECT count(*) FROM call_log) AS call_log,
                          (SELECT count(*) FROM audit_log) AS audit_log,
                          (SELECT count(*) FROM mcp_session_terminations) AS terminations"""
            )
        ).fetchone()
    return dict(row)


async def test_rows_past_their_retention_are_deleted_and_the_rest_kept(
    pool: AsyncConnectionPool[Connection],
) -> None:
    await seed(pool)
    pruned = await prune_once(pool, Settings())  # 30 days of calls, 365 of audit
    assert pruned == {"call_log": 2, "audit_log": 1, "mcp_session_terminations": 1}
    assert await counts(pool) == {"call_log": 2, "audit_log": 3, "terminations": 1}
    assert await prune_once(pool, Settings()) == {
        "call_log": 0,
        "audit_log": 0,
        "mcp_session_terminations": 0,
    }


async def test_zero_days_keeps_rows_forever(pool: AsyncConnectionPool[Connection]) -> None:
    await seed(pool)
    pruned = await prune_once(pool, Settings(call_log_retention_days=0, audit_log_retention_days=0))
    assert pruned == {"mcp_session_terminations": 1}
    assert await counts(pool) == {"call_log": 4, "audit_log": 4, "terminations": 1}


async def test_large_backlogs_go_in_batches(
    pool: AsyncConnectionPool[Connection], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(retention, "BATCH", 3)
    async with pool.connection() as conn:
        await conn.execute(
            """INSERT INTO call_log (called_at, workspace_id, agent_id, key_id, request_id,
                                     tool, outcome, duration_ms)
               SELECT now() - interval '90 days', 1, 1, 1, 'r', 't', 'ok', 1
                 FROM generate_series(1, 10)"""
        )
    pruned = await prune_once(pool, Settings())
    assert pruned is not None
    assert pruned["call_log"] == 10


async def test_only_one_process_prunes_at_a_time(pool: AsyncConnectionPool[Connection]) -> None:
    await seed(pool)
    async with pool.connection() as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", (retention._LOCK_KEY,))
        try:
            assert await prune_once(pool, Settings()) is None
        finally:
            await holder.execute("SELECT pg_advisory_unlock(%s)", (retention._LOCK_KEY,))
    assert (await counts(pool))["call_log"] == 4
