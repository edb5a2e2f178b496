"""Call log rows written where the gateways write them (the ``call_log`` table)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from shared.db import connect
from shared.principals import PrincipalRecord, principal_columns
from tests.support.approvals import TOOL

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)  # the first seeded call


async def seed_calls(
    database_url: str, count: int, *, outcome: str = "ok", person: PrincipalRecord | None = None
) -> list[str]:
    """``count`` call log rows of agent sales, a minute apart from T0; their request ids.
    ``person``: made with that person's token (no key), else with the agent's key."""
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            """SELECT a.id AS agent_id, a.workspace_id, k.id AS key_id FROM agents a
                 JOIN api_keys k ON k.agent_id = a.id WHERE a.slug = 'sales' LIMIT 1"""
        )
        found = await cur.fetchone()
        assert found is not None
        cur = await conn.execute("SELECT coalesce(max(id), 0) AS last FROM call_log")
        last = await cur.fetchone()
        assert last is not None
        start = int(last["last"])
        rows = [
            (
                T0 + timedelta(minutes=start + n),
                found["workspace_id"],
                found["agent_id"],
                None if person else found["key_id"],
                f"req_{start + n:016x}",
                TOOL,
                1,
                outcome,
                201 if outcome == "ok" else 503,
                1,
                12.5 + n,
                7.25,
                *principal_columns(person),
            )
            for n in range(count)
        ]
        async with conn.cursor() as insert:
            await insert.executemany(
                """INSERT INTO call_log (called_at, workspace_id, agent_id, key_id, request_id,
                                         tool, tool_version, outcome, upstream_status, attempts,
                                         duration_ms, upstream_ms, principal_issuer,
                                         principal_subject, principal_name, client_id)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)""",
                rows,
            )
    return [str(row[4]) for row in rows]
