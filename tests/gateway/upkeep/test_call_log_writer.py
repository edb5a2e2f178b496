"""CallLogWriter against the real database: batches, the bounded buffer, the
final flush, and riding out a database that errors or stops answering."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.upkeep.call_log import CallLogWriter, CallRecord
from mcp_gateway.upkeep.metrics import REGISTRY
from shared.db import Connection, connect, open_pool
from tests.support.gateway import wait_until


def row(number: int, *, request_id: str | None = None) -> CallRecord:
    """Odd numbers: a key's call; even: a person's (a token's principal, no key)."""
    person = number % 2 == 0
    return CallRecord(
        called_at=datetime.now(UTC),
        workspace_id=1,
        agent_id=2,
        key_id=None if person else 3,
        request_id=request_id or f"req_{number:04d}",
        tool="latest_rate",
        tool_version=1,
        outcome="ok" if number % 2 else "upstream_unavailable",
        upstream_status=200 if number % 2 else None,
        attempts=1,
        duration_ms=1.5,
        upstream_ms=1.25 if number % 2 else None,
        principal_issuer="https://idp.example.com" if person else None,
        principal_subject=f"person-{number}" if person else None,
        principal_name="Dana Ng" if person else None,
        client_id="desk-app" if person else None,
    )


def dropped() -> float:
    return REGISTRY.get_sample_value("crank_call_log_dropped_total") or 0.0


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool[Connection]]:
    pool = await open_pool(database_url, max_size=2, name="call-log-test", autocommit=True)
    try:
        yield pool
    finally:
        await pool.close()


async def logged(database_url: str) -> list[str]:
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT request_id FROM call_log ORDER BY id")
        return [r["request_id"] for r in await cur.fetchall()]


async def copy_waits_on_the_lock(watcher: Connection) -> bool:
    """Whether the writer's COPY into call_log is blocked on a table lock."""
    cur = await watcher.execute(
        "SELECT count(*) AS n FROM pg_stat_activity"
        " WHERE wait_event_type = 'Lock' AND query LIKE 'COPY call_log%%'"
    )
    found = await cur.fetchone()
    return found is not None and found["n"] == 1


async def test_flush_writes_every_buffered_row_in_one_batch_with_every_column(
    pool: AsyncConnectionPool[Connection], database_url: str
) -> None:
    writer = CallLogWriter(pool)
    for number in range(1, 1001):
        writer.record(row(number))

    assert await writer.flush() == 1000
    assert await writer.flush() == 0
    assert writer.buffered == 0
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n, count(DISTINCT xmin::text) AS transactions FROM call_log"
        )
        assert await cur.fetchone() == {"n": 1000, "transactions": 1}
        cur = await conn.execute("SELECT * FROM call_log WHERE request_id = 'req_0002'")
        stored = await cur.fetchone()
        cur = await conn.execute("SELECT * FROM call_log WHERE request_id = 'req_0003'")
        by_key = await cur.fetchone()
    for number, found in ((2, stored), (3, by_key)):  # a person's call and a key's
        assert found is not None
        expected = row(number)._asdict()
        assert {k: found[k] for k in expected if k != "called_at"} == {
            k: v for k, v in expected.items() if k != "called_at"
        }


async def test_background_task_writes_recorded_calls_within_an_interval(
    pool: AsyncConnectionPool[Connection], database_url: str
) -> None:
    writer = CallLogWriter(pool, interval_s=0.1)
    writer.start()
    try:
        writer.record(row(1))
        writer.record(row(2))

        async def written() -> bool:
            return await logged(database_url) == ["req_0001", "req_0002"]

        await wait_until(written, timeout_s=5)
    finally:
        await writer.stop()


async def test_stop_writes_the_rows_still_buffered(
    pool: AsyncConnectionPool[Connection], database_url: str
) -> None:
    writer = CallLogWriter(pool, interval_s=3600)
    writer.start()
    writer.record(row(1))

    await asyncio.wait_for(writer.stop(), timeout=10)

    assert await logged(database_url) == ["req_0001"]


async def test_stop_during_a_flush_also_writes_the_rows_recorded_meanwhile(
    pool: AsyncConnectionPool[Connection], database_url: str
) -> None:
    writer = CallLogWriter(pool, interval_s=0.01)
    async with (
        await connect(database_url) as locker,
        await connect(database_url, autocommit=True) as watcher,
    ):
        await locker.execute("LOCK TABLE call_log IN ACCESS EXCLUSIVE MODE")
        writer.start()
        writer.record(row(1))

        await wait_until(lambda: copy_waits_on_the_lock(watcher), timeout_s=5)
        writer.record(row(2))  # after the loop took its batch
        stopping = asyncio.create_task(writer.stop())
        await asyncio.sleep(0.05)
        await locker.rollback()
        await asyncio.wait_for(stopping, timeout=10)

    assert await logged(database_url) == ["req_0001", "req_0002"]


async def test_full_buffer_drops_the_oldest_rows_and_counts_them(
    pool: AsyncConnectionPool[Connection], database_url: str
) -> None:
    writer = CallLogWriter(pool, max_buffered=3)
    before = dropped()
    for number in range(1, 6):
        writer.record(row(number))

    assert writer.buffered == 3
    assert dropped() - before == 2
    await writer.flush()
    assert await logged(database_url) == ["req_0003", "req_0004", "req_0005"]


async def test_rows_survive_a_database_error_and_the_next_flush_writes_them_in_order(
    pool: AsyncConnectionPool[Connection], database_url: str
) -> None:
    writer = CallLogWriter(pool)
    writer.record(row(1))
    async with await connect(database_url, autocommit=True) as admin:
        await admin.execute("ALTER TABLE call_log RENAME TO call_log_away")
        try:
            with pytest.raises(psycopg.errors.UndefinedTable):
                await writer.flush()
            writer.record(row(2))
            assert writer.buffered == 2
        finally:
            await admin.execute("ALTER TABLE call_log_away RENAME TO call_log")

    assert await writer.flush() == 2
    assert await logged(database_url) == ["req_0001", "req_0002"]


async def test_background_task_keeps_retrying_until_the_database_answers_again(
    pool: AsyncConnectionPool[Connection], database_url: str
) -> None:
    writer = CallLogWriter(pool, interval_s=0.05)
    async with await connect(database_url, autocommit=True) as admin:
        await admin.execute("ALTER TABLE call_log RENAME TO call_log_away")
        try:
            writer.start()
            writer.record(row(1))
            await asyncio.sleep(0.3)  # several failed attempts
            assert writer.buffered == 1
        finally:
            await admin.execute("ALTER TABLE call_log_away RENAME TO call_log")

    async def written() -> bool:
        return await logged(database_url) == ["req_0001"]

    try:
        await wait_until(written, timeout_s=5)
    finally:
        await writer.stop()


async def test_a_flush_the_database_does_not_answer_in_time_is_requeued_within_the_bound(
    pool: AsyncConnectionPool[Connection], database_url: str
) -> None:
    writer = CallLogWriter(pool, max_buffered=4, flush_timeout_s=1.0)
    for number in (1, 2, 3):
        writer.record(row(number))
    before = dropped()
    async with (
        await connect(database_url) as locker,
        await connect(database_url, autocommit=True) as watcher,
    ):
        await locker.execute("LOCK TABLE call_log IN ACCESS EXCLUSIVE MODE")
        flushing = asyncio.create_task(writer.flush())

        await wait_until(lambda: copy_waits_on_the_lock(watcher), timeout_s=5)
        for number in (4, 5, 6):  # recorded while the batch is out
            writer.record(row(number))
        with pytest.raises(TimeoutError):
            await flushing
        await locker.rollback()

    # Six rows for four places: the two oldest go, the order stays.
    assert dropped() - before == 2
    assert await writer.flush() == 4
    assert await logged(database_url) == ["req_0003", "req_0004", "req_0005", "req_0006"]


async def test_a_batch_the_database_refuses_as_data_is_dropped_and_counted(
    pool: AsyncConnectionPool[Connection], database_url: str
) -> None:
    writer = CallLogWriter(pool)
    writer.record(row(1, request_id="req_\x00"))  # PostgreSQL text cannot hold NUL
    before = dropped()

    with pytest.raises(psycopg.DataError):
        await writer.flush()

    assert writer.buffered == 0
    assert dropped() - before == 1
    writer.record(row(2))
    await writer.flush()
    assert await logged(database_url) == ["req_0002"]
