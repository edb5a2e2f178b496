"""The DELETE confirmation asked of the human through a 2025 client
(docs/architecture.md, "Asking the human in the 2025 era").

A session whose initialize declared form elicitation (2025-06-18 or later; the
flag is signed into the session id) and whose tools/call accepts an SSE answer
gets, on that call's stream, an ``elicitation/create`` request with the same
form as the 2026-07-28 one (mcp_gateway.pipeline.elicitation). The client
answers with a separate POST, which may reach any replica: that replica writes
the answer into ``elicitation_answers`` (``record``), whose trigger sends
``NOTIFY crank_elicitation_answered``; the waiting replica wakes through the
same registry as approval waits (mcp_gateway.approvals.waiters, with a 1 s poll
behind it), reads and deletes the row, and goes on: ``accept`` runs the call
through the rest of the gates; ``decline``, ``cancel``, an error response, no
answer within ``CRANK_ELICITATION_TTL_S``, the client leaving or the replica
shutting down answer ``confirmation_declined`` (details ``action``). No ``ct_``
token is ever issued to such a call.

The request id is random (``el_`` and 128 bits) and its row is bound to the
session: a response with an unknown id, or from another session, changes
nothing and still gets 202, as any response does.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any

import psycopg
import structlog
from psycopg.types.json import Jsonb
from psycopg_pool import PoolTimeout

from mcp_gateway.approvals.waiters import ApprovalWaiters
from mcp_gateway.catalog.snapshot import Tool
from mcp_gateway.pipeline.context import ToolCallContext
from mcp_gateway.pipeline.elicitation import form_message
from mcp_gateway.transport.asgi import wait_disconnect
from mcp_gateway.transport.exchange import Exchange
from mcp_gateway.transport.jsonrpc import Message, encode
from shared.db import within
from shared.engine.errors import ToolError

log = structlog.get_logger(__name__)

CHANNEL = "crank_elicitation_answered"  # NOTIFY payload: the request id
ID_PREFIX = "el_"
ANSWERED_SQL = "SELECT id FROM elicitation_answers WHERE id = ANY(%s) AND answer IS NOT NULL"
_ACTIONS = frozenset(("accept", "decline", "cancel"))


def answer_waiters(pool: Any) -> ApprovalWaiters:
    """The registry of calls waiting for an elicitation answer in this process."""
    return ApprovalWaiters(
        pool, name="elicitation_wait_poll", finished_sql=ANSWERED_SQL, counted=False
    )


async def ask(
    ctx: ToolCallContext,
    tool: Tool,
    arguments: dict[str, Any],
    exchange: Exchange,
    session_digest: bytes,
) -> None:
    """Returns when the human accepted; raises ToolError ``confirmation_declined``."""
    state = exchange.state
    waiters: ApprovalWaiters = state.elicitation_waiters
    request_id = ID_PREFIX + secrets.token_urlsafe(16)
    async with ctx.pool.connection(timeout=5) as conn:
        await conn.execute(
            "INSERT INTO elicitation_answers (id, session_hash) VALUES (%s, %s)",
            (request_id, session_digest),
        )
    action = "timeout"
    try:
        with waiters.waiting(request_id) as answered:
            form = {
                "jsonrpc": "2.0",
                "id": request_id,
                "method": "elicitation/create",
                "params": {
                    "message": form_message(ctx, tool, arguments),
                    "requestedSchema": {"type": "object", "properties": {}},
                },
            }
            log.info("elicitation_asked", tool=tool.name, version=tool.version, era="2025")
            if await exchange.notify(encode(form)):
                gone = asyncio.ensure_future(wait_disconnect(exchange.receive))
                ended = asyncio.ensure_future(answered.wait())
                try:
                    await asyncio.wait(
                        {ended, gone},
                        timeout=state.settings.elicitation_ttl_s,
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                finally:
                    for task in (ended, gone):
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
                if gone.done() and not gone.cancelled():
                    action = "gone"
            else:
                action = "gone"
    finally:
        async with ctx.pool.connection(timeout=5) as conn:
            cur = await conn.execute(
                "DELETE FROM elicitation_answers WHERE id = %s RETURNING answer", (request_id,)
            )
            row = await cur.fetchone()
    if row is not None and row["answer"] is not None:
        action = _action_of(row["answer"])
    if action == "accept":
        log.info("elicitation_accepted", tool=tool.name, version=tool.version, era="2025")
        return
    log.info("elicitation_declined", tool=tool.name, action=action, era="2025")
    raise ToolError.of("confirmation_declined", language=ctx.language, details={"action": action})


def _action_of(answer: Any) -> str:
    """The form's action from the client's JSON-RPC response; an error response is a decline."""
    result = answer.get("result") if isinstance(answer, dict) else None
    action = result.get("action") if isinstance(result, dict) else None
    return action if action in _ACTIONS else "decline"


async def record(exchange: Exchange, message: Message, session_digest: bytes) -> None:
    """Keep a client's response to one of our requests for whichever replica waits on it."""
    request_id = message.id
    if not isinstance(request_id, str) or not request_id.startswith(ID_PREFIX):
        return
    answer = message.params  # the response's result or error

    async def write() -> None:
        async with exchange.state.pool.connection(timeout=5) as conn:
            await conn.execute(
                """UPDATE elicitation_answers SET answer = %s
                   WHERE id = %s AND session_hash = %s AND answer IS NULL""",
                (Jsonb(answer), request_id, session_digest),
            )

    try:
        await within(5, write())
    except (psycopg.Error, TimeoutError, PoolTimeout):
        # Unrecorded, the wait ends declined at its deadline: nothing runs unconfirmed.
        log.warning("elicitation_answer_lost", exc_info=True)
        return
    exchange.state.elicitation_waiters.finished(request_id)  # a local waiter: no round trip
