"""The approvals table's rules, in the database itself (migrations/0004):
The transition table enforced by a trigger (every edge, allowed or not),
one active row per call enforced by a unique index, and the data layer of
mcp_gateway.approvals.store on top of them (expiry, decisions, retention)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals import expiry, store
from mcp_gateway.approvals.expiry import ExpirySweeper
from mcp_gateway.approvals.store import retention_rule
from mcp_gateway.upkeep import retention
from shared.db import Connection, connect, open_pool
from shared.engine.canonical import arguments_hash
from shared.settings import Settings
from tests.support.approvals import behind_the_trigger
from tests.support.gateway import run_until
from tests.support.metrics import background_failures

STATUSES = ("pending", "approved", "denied", "expired", "executing", "completed", "failed")
# docs/architecture.md, "Approval state machine", verbatim.
ALLOWED = {
    ("pending", "approved"),
    ("pending", "denied"),
    ("pending", "expired"),
    ("approved", "executing"),
    ("executing", "executing"),  # lease re-claimed, attempt + 1
    ("executing", "approved"),  # released on shutdown
    ("executing", "completed"),
    ("executing", "failed"),
}
DISALLOWED = sorted(set(itertools.product(STATUSES, STATUSES)) - ALLOWED)
RETENTION_S = 86400  # CRANK_APPROVAL_OUTCOME_RETENTION_S's default


async def prune(pool: AsyncConnectionPool[Connection], settings: Settings) -> dict[str, int] | None:
    """A retention round over every rule the gateway prunes by (mcp_gateway.app wires them)."""
    return await retention.prune_once(pool, settings, [retention_rule(settings)])


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool[Connection]]:
    opened = await open_pool(database_url, max_size=4, autocommit=True)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
async def ids(pool: AsyncConnectionPool[Connection]) -> dict[str, int]:
    """A workspace with agents ``a`` and ``b`` and one operation."""
    async with pool.connection() as conn:
        ws = await (
            await conn.execute("INSERT INTO workspaces (slug) VALUES ('default') RETURNING id")
        ).fetchone()
        assert ws is not None
        found = {"workspace": int(ws["id"])}
        for slug in ("a", "b"):
            row = await (
                await conn.execute(
                    "INSERT INTO agents (workspace_id, slug, draft) VALUES (%s, %s, '{}') "
                    "RETURNING id",
                    (ws["id"], slug),
                )
            ).fetchone()
            assert row is not None
            found[slug] = int(row["id"])
        op = await (
            await conn.execute(
                "INSERT INTO operations (workspace_id, name, draft) VALUES (%s, 'refund', '{}') "
                "RETURNING id",
                (ws["id"],),
            )
        ).fetchone()
        assert op is not None
        found["operation"] = int(op["id"])
    return found


def new_approval(ids: dict[str, int], arguments: dict[str, Any], ttl_s: int = 3600) -> Any:
    return store.NewApproval(
        workspace_id=ids["workspace"],
        agent_id=ids["a"],
        operation_id=ids["operation"],
        key_id=1,
        tool="refund",
        version=1,
        arguments=arguments,
        arguments_hash=arguments_hash(arguments),
        request={"method": "POST", "url": "http://upstream/refunds", "headers": [], "body": None},
        ttl_s=ttl_s,
        max_attempts=3,
    )


async def insert_row(conn: Connection, ids: dict[str, int], status: str, n: int = 0) -> str:
    """A row in ``status`` (an INSERT may start anywhere; the trigger guards updates)."""
    approval_id = store.new_approval_id()
    await conn.execute(
        """INSERT INTO approvals (id, workspace_id, agent_id, operation_id, tool, version,
                                  arguments, arguments_hash, request, status, expires_at)
           VALUES (%s, %s, %s, %s, 'refund', 1, '{}', %s, '{}', %s, now() + interval '1 hour')""",
        (approval_id, ids["workspace"], ids["a"], ids["operation"], bytes([n]) * 32, status),
    )
    return approval_id


async def status_of(conn: Connection, approval_id: str) -> str:
    row = await (
        await conn.execute("SELECT status FROM approvals WHERE id = %s", (approval_id,))
    ).fetchone()
    assert row is not None
    return str(row["status"])


@pytest.mark.parametrize(("before", "after"), sorted(ALLOWED))
async def test_every_transition_of_the_table_moves_the_row(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int], before: str, after: str
) -> None:
    async with pool.connection() as conn:
        approval_id = await insert_row(conn, ids, before)
        cur = await conn.execute(
            "UPDATE approvals SET status = %s WHERE id = %s", (after, approval_id)
        )
        assert cur.rowcount == 1
        assert await status_of(conn, approval_id) == after


@pytest.mark.parametrize(("before", "after"), DISALLOWED)
async def test_every_transition_outside_the_table_changes_nothing(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int], before: str, after: str
) -> None:
    async with pool.connection() as conn:
        approval_id = await insert_row(conn, ids, before)
        cur = await conn.execute(
            "UPDATE approvals SET status = %s, note = 'sneaked in' WHERE id = %s",
            (after, approval_id),
        )
        assert cur.rowcount == 0
        row = await (
            await conn.execute("SELECT status, note FROM approvals WHERE id = %s", (approval_id,))
        ).fetchone()
        assert row == {"status": before, "note": None}


async def test_a_second_active_row_for_the_same_call_is_refused_by_the_database(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int]
) -> None:
    async with pool.connection() as conn:
        for status in ("pending", "approved", "executing"):
            first = await insert_row(conn, ids, status, n=7)
            with pytest.raises(psycopg.errors.UniqueViolation):
                await insert_row(conn, ids, "pending", n=7)
            await conn.execute("DELETE FROM approvals WHERE id = %s", (first,))
        # Finished rows do not count: any number of them, plus one active.
        for status in ("denied", "expired", "completed", "failed", "pending"):
            await insert_row(conn, ids, status, n=7)
        count = await (await conn.execute("SELECT count(*) AS n FROM approvals")).fetchone()
        assert count == {"n": 5}


async def test_a_concurrent_identical_insert_waits_for_the_first_and_finds_its_row(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int], database_url: str
) -> None:
    new = new_approval(ids, {"order_id": "ord_1", "amount": 100})

    async def second() -> str | None:
        async with pool.connection() as conn:
            return await store.insert_unless_active(conn, new, RETENTION_S)

    async with await connect(database_url) as holder:
        async with holder.transaction():  # holds its insert open (a savepoint inside)
            held = await store.insert_unless_active(holder, new, RETENTION_S)
            assert held is not None
            racing = asyncio.create_task(second())
            await asyncio.sleep(0.3)
            assert not racing.done()  # waits on the uncommitted row of the unique index
        assert await asyncio.wait_for(racing, 10) is None
    async with pool.connection() as conn:
        assert await store.find_active(conn, new) == (held, False)


async def test_a_call_that_finishes_between_the_claim_and_the_insert_delivers_its_outcome(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int]
) -> None:
    """The repeat's claim misses the running row; the row finishes; the repeat's insert
    must not open a second approval (a human asked again for a call that ran, and its
    outcome never delivered: seen by bench/soak.py). The next claim delivers it."""
    new = new_approval(ids, {"order_id": "ord_2", "amount": 100})
    async with pool.connection() as conn:
        running = await store.insert_unless_active(conn, new, RETENTION_S)
        assert running is not None
        for status in ("approved", "executing"):
            await conn.execute("UPDATE approvals SET status = %s WHERE id = %s", (status, running))
        assert await store.claim_outcome(conn, new, RETENTION_S) is None  # still running
        await conn.execute(
            "UPDATE approvals SET status = 'completed', completed_at = now() WHERE id = %s",
            (running,),
        )
        assert await store.insert_unless_active(conn, new, RETENTION_S) is None
        assert await store.find_active(conn, new) is None
        claimed = await store.claim_outcome(conn, new, RETENTION_S)
        assert claimed is not None
        assert (claimed.id, claimed.status) == (running, "completed")
        count = await (await conn.execute("SELECT count(*) AS n FROM approvals")).fetchone()
        assert count == {"n": 1}
        created = await (
            await conn.execute(
                "SELECT count(*) AS n FROM webhook_deliveries WHERE approval_id <> %s", (running,)
            )
        ).fetchone()
        assert created == {"n": 0}  # the rolled-back insert enqueued nothing
        # Once delivered, the next repeat asks anew, as after any delivery.
        again = await store.insert_unless_active(conn, new, RETENTION_S)
        assert again is not None
        assert again != running


async def test_an_insert_waiting_on_a_finishing_row_sees_the_finish_and_inserts_nothing(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int], database_url: str
) -> None:
    """The finish is still uncommitted when the insert meets the unique index: the insert
    waits for it, then its check sees the finished row."""
    new = new_approval(ids, {"order_id": "ord_3", "amount": 100})
    async with pool.connection() as conn:
        running = await store.insert_unless_active(conn, new, RETENTION_S)
        assert running is not None
        for status in ("approved", "executing"):
            await conn.execute("UPDATE approvals SET status = %s WHERE id = %s", (status, running))
    async with await connect(database_url) as finisher:  # not autocommit: holds its finish open
        await finisher.execute(
            "UPDATE approvals SET status = 'failed', completed_at = now() WHERE id = %s",
            (running,),
        )

        async def repeat() -> str | None:
            async with pool.connection() as conn:
                return await store.insert_unless_active(conn, new, RETENTION_S)

        racing = asyncio.create_task(repeat())
        await asyncio.sleep(0.3)
        assert not racing.done()  # waits on the finishing row of the unique index
        await finisher.commit()
        assert await asyncio.wait_for(racing, 10) is None
    async with pool.connection() as conn:
        claimed = await store.claim_outcome(conn, new, RETENTION_S)
        assert claimed is not None
        assert (claimed.id, claimed.status) == (running, "failed")


async def test_a_new_approval_is_made_when_the_previous_outcome_is_delivered_or_too_old(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int]
) -> None:
    async with pool.connection() as conn:
        for n, (delivered, age) in enumerate(((True, "0"), (False, "2 days"))):
            new = new_approval(ids, {"order_id": f"ord_old_{n}", "amount": 1})
            await conn.execute(
                """INSERT INTO approvals (id, workspace_id, agent_id, operation_id, tool, version,
                                          arguments, arguments_hash, request, status, decided_at,
                                          delivered_at, expires_at)
                   VALUES (%s, %s, %s, %s, 'refund', 1, '{}', %s, '{}', 'denied',
                           now() - %s::interval, CASE WHEN %s THEN now() END,
                           now() + interval '1 hour')""",
                (
                    store.new_approval_id(),
                    ids["workspace"],
                    ids["a"],
                    ids["operation"],
                    new.arguments_hash,
                    age,
                    delivered,
                ),
            )
            assert await store.insert_unless_active(conn, new, RETENTION_S) is not None


async def test_the_sweep_expires_only_pending_rows_past_their_time(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int]
) -> None:
    async with pool.connection() as conn:
        overdue = await insert_row(conn, ids, "pending", n=1)
        current = await insert_row(conn, ids, "pending", n=2)
        approved = await insert_row(conn, ids, "approved", n=3)
        await behind_the_trigger(
            conn,
            "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id IN (%s, %s)",
            (overdue, approved),
        )
        assert await store.expire_overdue(conn) == 1
        assert [await status_of(conn, i) for i in (overdue, current, approved)] == [
            "expired",
            "pending",
            "approved",
        ]
        assert await store.expire_overdue(conn) == 0


async def test_an_unexpected_exception_in_a_sweep_leaves_the_loop_running_and_is_counted(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    async with pool.connection() as conn:
        overdue = await insert_row(conn, ids, "pending", n=1)
        await behind_the_trigger(
            conn, "UPDATE approvals SET expires_at = now() - interval '1 second'"
        )
    sweeps = 0

    async def crashes_once(conn: Connection) -> int:
        nonlocal sweeps
        sweeps += 1
        if sweeps == 1:
            raise RuntimeError("a bug in the first sweep")
        return await store.expire_overdue(conn)

    monkeypatch.setattr(expiry, "expire_overdue", crashes_once)
    before = background_failures("approval_expiry")

    async def expired() -> bool:
        async with pool.connection() as conn:
            return await status_of(conn, overdue) == "expired"

    logs = await run_until(ExpirySweeper(pool, interval_s=0.05), expired)

    assert background_failures("approval_expiry") - before == 1
    crashed = [e for e in logs if e["event"] == "background_task_crashed"]
    assert [(e["task"], e["log_level"]) for e in crashed] == [("approval_expiry", "error")]


async def test_the_sweep_goes_in_batches(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(store, "SWEEP_BATCH", 3)
    async with pool.connection() as conn:
        for n in range(7):
            await insert_row(conn, ids, "pending", n=n)
        await behind_the_trigger(
            conn, "UPDATE approvals SET expires_at = now() - interval '1 second'"
        )
        assert await store.expire_overdue(conn) == 7


async def test_a_decision_is_one_statement_with_its_audit_row_and_only_on_pending_rows(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int]
) -> None:
    async with pool.connection() as conn:
        pending = await insert_row(conn, ids, "pending", n=1)
        decision = store.Decision(pending, ids["a"], "default/a", "denied", "crk_approval_x", "no")
        record = await store.decide(conn, decision)
        assert record is not None
        assert (record.status, record.decided_by, record.note) == ("denied", "crk_approval_x", "no")
        assert record.decided_at is not None
        # Not pending any more, another agent's, unknown: nothing changes, nothing is audited.
        approve = store.Decision(pending, ids["a"], "default/a", "approved", "crk_approval_y", None)
        assert await store.decide(conn, approve) is None
        other = await insert_row(conn, ids, "pending", n=2)
        stolen = store.Decision(other, ids["b"], "default/b", "approved", "crk_approval_y", None)
        assert await store.decide(conn, stolen) is None
        assert await store.get(conn, ids["b"], other) is None
        assert await status_of(conn, other) == "pending"
        audit = await (
            await conn.execute("SELECT actor, action, resource_type, resource_name FROM audit_log")
        ).fetchall()
        assert audit == [
            {
                "actor": "approval key crk_approval_x…",
                "action": "approval.denied",
                "resource_type": "approval",
                "resource_name": pending,
            }
        ]


async def test_a_decision_on_a_row_past_its_time_changes_nothing(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int]
) -> None:
    async with pool.connection() as conn:
        late = await insert_row(conn, ids, "pending", n=1)
        await behind_the_trigger(
            conn,
            "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = %s",
            (late,),
        )
        decision = store.Decision(late, ids["a"], "default/a", "approved", "crk_approval_x", None)
        assert await store.decide(conn, decision) is None
        assert await status_of(conn, late) == "pending"  # the caller expires it, not decide


async def test_finished_approvals_are_pruned_after_their_retention_and_active_ones_never(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int]
) -> None:
    async with pool.connection() as conn:
        rows = {
            status: await insert_row(conn, ids, status, n=i) for i, status in enumerate(STATUSES)
        }
        # Everything happened long ago.
        await behind_the_trigger(
            conn,
            """UPDATE approvals SET created_at = now() - interval '400 days',
                      expires_at = now() - interval '399 days',
                      decided_at = CASE id WHEN %s THEN now() - interval '100 days' END,
                      completed_at = CASE id WHEN %s THEN now() - interval '10 days'
                                             WHEN %s THEN now() - interval '95 days' END""",
            (rows["denied"], rows["completed"], rows["failed"]),
        )
    pruned = await prune(pool, Settings())  # 90 days of finished approvals
    assert pruned is not None
    assert pruned["approvals"] == 3  # denied, expired, failed: finished over 90 days ago
    async with pool.connection() as conn:
        left = await (await conn.execute("SELECT status FROM approvals ORDER BY status")).fetchall()
    assert [r["status"] for r in left] == ["approved", "completed", "executing", "pending"]
    kept = await prune(pool, Settings(approvals_retention_days=0))
    assert kept is not None
    assert "approvals" not in kept


async def test_a_finished_row_is_marked_delivered_once_and_nothing_else_changes_with_it(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int]
) -> None:
    """The one edge migrations/0007 adds: finished → the same status, delivered_at set once."""
    mark = "UPDATE approvals SET delivered_at = now() WHERE id = %s"
    async with pool.connection() as conn:
        for n, status in enumerate(STATUSES):
            approval_id = await insert_row(conn, ids, status, n=n)
            cur = await conn.execute(mark, (approval_id,))
            finished = status in ("denied", "expired", "completed", "failed")
            assert cur.rowcount == (1 if finished else 0), status
            again = await conn.execute(
                mark.replace("now()", "now() + interval '1 s'"), (approval_id,)
            )
            assert again.rowcount == 0, status  # once
        other = await insert_row(conn, ids, "completed", n=50)
        # Delivered together with any other change: skipped.
        for change in ("note = 'x'", "response_payload = '{}'", "status = 'failed'"):
            cur = await conn.execute(
                f"UPDATE approvals SET delivered_at = now(), {change} WHERE id = %s", (other,)
            )
            assert cur.rowcount == 0, change
        # An ordinary transition cannot set it either.
        pending = await insert_row(conn, ids, "pending", n=51)
        cur = await conn.execute(
            "UPDATE approvals SET status = 'denied', delivered_at = now() WHERE id = %s", (pending,)
        )
        assert cur.rowcount == 0


async def test_retention_keeps_a_finished_approval_while_its_outcome_may_be_delivered(
    pool: AsyncConnectionPool[Connection], ids: dict[str, int]
) -> None:
    async with pool.connection() as conn:
        undelivered = await insert_row(conn, ids, "denied", n=1)
        delivered = await insert_row(conn, ids, "denied", n=2)
        too_old = await insert_row(conn, ids, "denied", n=3)
        await behind_the_trigger(
            conn,
            """UPDATE approvals SET
                      decided_at = now() - CASE id WHEN %s THEN interval '4 days'
                                                   ELSE interval '2 days' END,
                      delivered_at = CASE id WHEN %s THEN now() END""",
            (too_old, delivered),
        )
    # Finished approvals are kept 1 day, undelivered outcomes deliverable for 3 days.
    settings = Settings(approvals_retention_days=1, approval_outcome_retention_s=3 * 86400)
    pruned = await prune(pool, settings)
    assert pruned is not None
    assert pruned["approvals"] == 2
    async with pool.connection() as conn:
        left = await (await conn.execute("SELECT id FROM approvals")).fetchall()
    assert [r["id"] for r in left] == [undelivered]
