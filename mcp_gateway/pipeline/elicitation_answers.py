"""Every statement on ``elicitation_answers``: the 2025 era's confirmation forms in
flight, and the registry of calls waiting for their answers
(mcp_gateway.pipeline.elicitation_stream).

A row is made when a form is sent, bound to the session that may answer it;
any replica writes the answer (its trigger sends ``NOTIFY
crank_elicitation_answered`` with the id); the waiting replica reads and
deletes it. A crashed replica's rows are pruned after a day
(mcp_gateway.upkeep.retention).
"""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals.waiters import ApprovalWaiters
from shared.db import DB_TIMEOUT_S, Connection

CHANNEL = "crank_elicitation_answered"  # NOTIFY payload: the request id
_ANSWERED = "SELECT id FROM elicitation_answers WHERE id = ANY(%s) AND answer IS NOT NULL"


def answer_waiters(pool: AsyncConnectionPool[Connection]) -> ApprovalWaiters:
    """The registry of calls waiting for an elicitation answer in this process."""
    return ApprovalWaiters(
        pool, name="elicitation_wait_poll", finished_sql=_ANSWERED, counted=False
    )


async def open_question(
    pool: AsyncConnectionPool[Connection], request_id: str, session_digest: bytes
) -> None:
    async with pool.connection(timeout=DB_TIMEOUT_S) as conn:
        await conn.execute(
            "INSERT INTO elicitation_answers (id, session_hash) VALUES (%s, %s)",
            (request_id, session_digest),
        )


async def take_answer(pool: AsyncConnectionPool[Connection], request_id: str) -> Any | None:
    """The answer recorded for ``request_id`` (None: none came), the row deleted."""
    async with pool.connection(timeout=DB_TIMEOUT_S) as conn:
        cur = await conn.execute(
            "DELETE FROM elicitation_answers WHERE id = %s RETURNING answer", (request_id,)
        )
        row = await cur.fetchone()
    return None if row is None else row["answer"]


async def record_answer(
    pool: AsyncConnectionPool[Connection], request_id: str, session_digest: bytes, answer: Any
) -> None:
    """Keep the answer, once, when the question was put in this session."""
    async with pool.connection(timeout=DB_TIMEOUT_S) as conn:
        await conn.execute(
            """UPDATE elicitation_answers SET answer = %s
               WHERE id = %s AND session_hash = %s AND answer IS NULL""",
            (Jsonb(answer), request_id, session_digest),
        )
