"""Retention: old call log and audit rows, finished approvals, expired
session ends and console sessions, used confirmation tokens and idempotency records are pruned, in
batches, by one process at a time (the approvals rule in detail:
tests/gateway/approvals/test_sql.py)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals.store import retention_rule
from mcp_gateway.upkeep import retention
from shared.db import Connection, connect, open_pool
from shared.settings import Settings
from tests.support.gateway import run_until, wait_until
from tests.support.metrics import background_failures


async def prune(pool: AsyncConnectionPool[Connection], settings: Settings) -> dict[str, int] | None:
    """A retention round over every rule the gateway prunes by (mcp_gateway.app wires them)."""
    return await retention.prune_once(pool, settings, [retention_rule(settings)])


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
        # Console sessions and sign-in links: one expired an hour ago, one expires in an hour.
        await conn.execute(
            """WITH u AS (INSERT INTO admin_users (name) VALUES ('console') RETURNING id)
               INSERT INTO admin_tokens (user_id, prefix, hash) SELECT id, 'p', '\\x01' FROM u"""
        )
        for hours in (-1, 1):
            await conn.execute(
                """INSERT INTO console_sessions (hash, token_id, csrf, expires_at)
                   SELECT %s, id, 'c', now() + make_interval(hours => %s) FROM admin_tokens""",
                (f"s{hours}".encode(), hours),
            )
            await conn.execute(
                """INSERT INTO console_sign_in_links (hash, token_id, expires_at)
                   SELECT %s, id, now() + make_interval(hours => %s) FROM admin_tokens""",
                (f"l{hours}".encode(), hours),
            )
        for hours in (48, 1):  # a crashed replica's row, and one a call still waits on
            await conn.execute(
                """INSERT INTO elicitation_answers (id, session_hash, created_at)
                   VALUES (%s, '\\x00', now() - make_interval(hours => %s))""",
                (f"el_{hours}", hours),
            )


async def counts(pool: AsyncConnectionPool[Connection]) -> dict[str, int]:
    async with pool.connection() as conn:
        row: Any = await (
            await conn.execute(
                """SELECT (SELECT count(*) FROM call_log) AS call_log,
                          (SELECT count(*) FROM audit_log) AS audit_log,
                          (SELECT count(*) FROM mcp_session_terminations) AS terminations,
                          (SELECT count(*) FROM console_sessions) AS console_sessions,
                          (SELECT count(*) FROM console_sign_in_links) AS console_links"""
            )
        ).fetchone()
    return dict(row)


async def test_rows_past_their_retention_are_deleted_and_the_rest_kept(
    pool: AsyncConnectionPool[Connection],
) -> None:
    await seed(pool)
    pruned = await prune(pool, Settings())  # 30 days of calls, 365 of audit
    assert pruned == {
        "call_log": 2,
        "audit_log": 1,
        "approvals": 0,  # gateway/approvals/test_sql.py: finished approvals by when they finished
        "webhook_deliveries": 0,
        "mcp_session_terminations": 1,
        "console_sessions": 1,
        "console_sign_in_links": 1,
        "elicitation_answers": 1,
        "confirmation_uses": 0,
        "idempotency_records": 0,
    }
    assert await counts(pool) == {
        "call_log": 2,
        "audit_log": 3,
        "terminations": 1,
        "console_sessions": 1,
        "console_links": 1,
    }
    assert await prune(pool, Settings()) == {
        "call_log": 0,
        "audit_log": 0,
        "approvals": 0,
        "webhook_deliveries": 0,
        "mcp_session_terminations": 0,
        "console_sessions": 0,
        "console_sign_in_links": 0,
        "elicitation_answers": 0,
        "confirmation_uses": 0,
        "idempotency_records": 0,
    }


async def test_zero_days_keeps_rows_forever(pool: AsyncConnectionPool[Connection]) -> None:
    await seed(pool)
    pruned = await prune(
        pool,
        Settings(
            call_log_retention_days=0,
            audit_log_retention_days=0,
            approvals_retention_days=0,
            webhook_retention_days=0,
        ),
    )
    assert pruned == {
        "mcp_session_terminations": 1,
        "console_sessions": 1,
        "console_sign_in_links": 1,
        "elicitation_answers": 1,
        "confirmation_uses": 0,
        "idempotency_records": 0,
    }
    assert await counts(pool) == {
        "call_log": 4,
        "audit_log": 4,
        "terminations": 1,
        "console_sessions": 1,
        "console_links": 1,
    }


async def test_finished_webhook_deliveries_go_after_their_period_and_unsent_ones_stay(
    pool: AsyncConnectionPool[Connection],
) -> None:
    async with pool.connection() as conn:
        await conn.execute(
            """WITH ws AS (INSERT INTO workspaces (slug) VALUES ('w') RETURNING id),
                    ag AS (INSERT INTO agents (workspace_id, slug, draft)
                           SELECT id, 'a', '{}' FROM ws RETURNING id, workspace_id)
               INSERT INTO webhook_subscriptions (id, workspace_id, agent_id, url, events, format,
                                                  ciphertext, nonce, key_id, created_by)
               SELECT 'whsub_1', workspace_id, id, 'https://hooks.example.com/',
                      '{approval.created}', 'standard', '', '', 'k', 't' FROM ag"""
        )
        # (status, finished days ago): only the finished ones past 30 days go.
        rows = [("delivered", 31), ("failed", 31), ("delivered", 29), ("pending", None)]
        for n, (status, days) in enumerate(rows):
            await conn.execute(
                """INSERT INTO webhook_deliveries (webhook_id, subscription_id, workspace_id,
                          agent_id, approval_id, event, payload, status, created_at, finished_at)
                   SELECT %s, 'whsub_1', workspace_id, agent_id, 'approval_x', 'approval.created',
                          '{}', %s, now() - interval '40 days',
                          now() - make_interval(days => %s)
                     FROM webhook_subscriptions""",
                (f"msg_{n}", status, days),
            )
    pruned = await prune(pool, Settings(webhook_retention_days=30))
    assert pruned is not None
    assert pruned["webhook_deliveries"] == 2
    async with pool.connection() as conn:
        cur = await conn.execute("SELECT webhook_id FROM webhook_deliveries ORDER BY webhook_id")
        assert [row["webhook_id"] for row in await cur.fetchall()] == ["msg_2", "msg_3"]


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
    pruned = await prune(pool, Settings())
    assert pruned is not None
    assert pruned["call_log"] == 10


async def test_only_one_process_prunes_at_a_time(pool: AsyncConnectionPool[Connection]) -> None:
    await seed(pool)
    async with pool.connection() as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", (retention._LOCK_KEY,))
        try:
            assert await prune(pool, Settings()) is None
        finally:
            await holder.execute("SELECT pg_advisory_unlock(%s)", (retention._LOCK_KEY,))
    assert (await counts(pool))["call_log"] == 4


async def _agent_and_operation(conn: Connection) -> tuple[int, int]:
    """The rows an idempotency record names (its foreign keys)."""
    workspace: Any = await (
        await conn.execute("INSERT INTO workspaces (slug) VALUES ('keep') RETURNING id")
    ).fetchone()
    operation: Any = await (
        await conn.execute(
            "INSERT INTO operations (workspace_id, name, draft) VALUES (%s, 'op', '{}') RETURNING id",
            (workspace["id"],),
        )
    ).fetchone()
    agent: Any = await (
        await conn.execute(
            "INSERT INTO agents (workspace_id, slug, draft) VALUES (%s, 'a', '{}') RETURNING id",
            (workspace["id"],),
        )
    ).fetchone()
    return agent["id"], operation["id"]


_RECORD = """INSERT INTO idempotency_records (agent_id, operation_id, key_hash, arguments_hash,
                                               status, claim, locked_until, result, expires_at)
             VALUES (%s, %s, %s, '\\x00', %s, '\\x00', %s, %s, now() + make_interval(secs => %s))"""


async def test_used_tokens_and_idempotency_records_go_once_expired(
    pool: AsyncConnectionPool[Connection],
) -> None:
    async with pool.connection() as conn:
        agent, operation = await _agent_and_operation(conn)
        for n, seconds in enumerate((-60, -1, 60)):
            await conn.execute(
                """INSERT INTO confirmation_uses (token_hash, expires_at)
                   VALUES (%s, now() + make_interval(secs => %s))""",
                (bytes([n]), seconds),
            )
        rows = [  # (key, status, locked_until, result, expires in s)
            (b"done-old", "completed", None, Jsonb({"value": 1}), -1),
            (b"done-new", "completed", None, Jsonb({"value": 2}), 3600),
            (b"unknown-old", "unknown", datetime.now(UTC), None, -1),
            (b"running", "in_progress", datetime.now(UTC) + timedelta(minutes=1), None, 3600),
        ]
        for key, status, locked_until, result, expires in rows:
            await conn.execute(
                _RECORD, (agent, operation, key, status, locked_until, result, expires)
            )
    pruned = await prune(pool, Settings())
    assert pruned is not None
    assert (pruned["confirmation_uses"], pruned["idempotency_records"]) == (2, 2)
    async with pool.connection() as conn:
        left: Any = await (
            await conn.execute(
                """SELECT (SELECT array_agg(token_hash) FROM confirmation_uses) AS tokens,
                          (SELECT array_agg(key_hash ORDER BY key_hash)
                             FROM idempotency_records) AS records"""
            )
        ).fetchone()
    assert left["tokens"] == [bytes([2])]
    assert left["records"] == [b"done-new", b"running"]


async def test_a_record_claimed_anew_while_pruning_is_kept(
    pool: AsyncConnectionPool[Connection], database_url: str
) -> None:
    """Forced interleaving: the prune's subquery sees the expired row, its DELETE
    waits for the claim holding the row, and re-checks the condition on the
    claimed version once the claim commits."""
    async with pool.connection() as conn:
        agent, operation = await _agent_and_operation(conn)
        await conn.execute(_RECORD, (agent, operation, b"k", "completed", None, Jsonb(1), -1))
    async with await connect(database_url) as holder:  # a transaction: the claim
        await holder.execute(
            """UPDATE idempotency_records SET status = 'in_progress', result = NULL,
                      locked_until = now() + interval '1 minute',
                      expires_at = now() + interval '1 day'"""
        )
        pruning = asyncio.create_task(prune(pool, Settings()))

        async def delete_waits() -> bool:
            async with pool.connection() as conn:
                row: Any = await (
                    await conn.execute(
                        """SELECT count(*) AS n FROM pg_stat_activity
                            WHERE wait_event_type = 'Lock'
                              AND query LIKE 'DELETE FROM idempotency_records%%'"""
                    )
                ).fetchone()
            return bool(row["n"] == 1)

        await wait_until(delete_waits)
        await holder.commit()
    pruned = await asyncio.wait_for(pruning, 10)
    assert pruned is not None
    assert pruned["idempotency_records"] == 0
    async with pool.connection() as conn:
        row: Any = await (await conn.execute("SELECT status FROM idempotency_records")).fetchone()
    assert row["status"] == "in_progress"


async def test_an_unexpected_exception_in_a_round_leaves_the_loop_running_and_is_counted(
    pool: AsyncConnectionPool[Connection], monkeypatch: pytest.MonkeyPatch
) -> None:
    await seed(pool)
    rounds = 0

    real_prune_once = retention.prune_once

    async def crashes_once(
        pool: AsyncConnectionPool[Connection], settings: Settings, extra: Any = ()
    ) -> dict[str, int] | None:
        nonlocal rounds
        rounds += 1
        if rounds == 1:
            raise RuntimeError("a bug in the first round")
        return await real_prune_once(pool, settings, extra)

    monkeypatch.setattr(retention, "prune_once", crashes_once)
    before = background_failures("retention")

    async def pruned() -> bool:
        return await counts(pool) == {
            "call_log": 2,
            "audit_log": 3,
            "terminations": 1,
            "console_sessions": 1,
            "console_links": 1,
        }

    pruner = retention.Pruner(pool, Settings(), interval_s=0.05, first_run_s=0)
    logs = await run_until(pruner, pruned)

    assert background_failures("retention") - before == 1
    crashed = [e for e in logs if e["event"] == "background_task_crashed"]
    assert [(e["task"], e["log_level"]) for e in crashed] == [("retention", "error")]
