"""The DELETE confirmation asked of the human through a 2025 client.

``ask`` sends the form on the call's stream and waits for the answer, which ``record``
keeps in ``elicitation_answers`` on whichever replica receives it (docs/architecture.md,
"Asking the human in the 2025 era").
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from mcp_gateway.approvals.waiters import ApprovalWaiters
from mcp_gateway.catalog.snapshot import Tool
from mcp_gateway.pipeline import elicitation_answers
from mcp_gateway.pipeline.channel import ClientChannel
from mcp_gateway.pipeline.context import ToolCallContext
from mcp_gateway.pipeline.elicitation import ACTIONS, form_message
from shared.db import DB_TIMEOUT_S, Connection, within
from shared.engine.errors import ToolError

log = structlog.get_logger(__name__)

ID_PREFIX = "el_"


async def ask(
    ctx: ToolCallContext,
    tool: Tool,
    arguments: dict[str, Any],
    channel: ClientChannel,
    session_digest: bytes,
    waiters: ApprovalWaiters,
    ttl_s: float,
) -> None:
    """Returns when the human accepted; raises ToolError ``confirmation_declined``."""
    request_id = ID_PREFIX + secrets.token_urlsafe(16)
    await elicitation_answers.open_question(ctx.pool, request_id, session_digest)
    action = "timeout"
    try:
        with waiters.waiting(request_id) as answered:
            log.info("elicitation_asked", tool=tool.name, version=tool.version, era="2025")
            if await channel.ask(request_id, form_message(ctx, tool, arguments)):
                gone = asyncio.ensure_future(channel.gone())
                ended = asyncio.ensure_future(answered.wait())
                try:
                    await asyncio.wait(
                        {ended, gone}, timeout=ttl_s, return_when=asyncio.FIRST_COMPLETED
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
        answer = await elicitation_answers.take_answer(ctx.pool, request_id)
    if answer is not None:
        action = _action_of(answer)
    if action == "accept":
        log.info("elicitation_accepted", tool=tool.name, version=tool.version, era="2025")
        return
    log.info("elicitation_declined", tool=tool.name, action=action, era="2025")
    raise ToolError.of("confirmation_declined", language=ctx.language, details={"action": action})


def _action_of(answer: Any) -> str:
    """The form's action from the client's JSON-RPC response; an error response is a decline."""
    result = answer.get("result") if isinstance(answer, dict) else None
    action = result.get("action") if isinstance(result, dict) else None
    return action if action in ACTIONS else "decline"


async def record(
    pool: AsyncConnectionPool[Connection],
    waiters: ApprovalWaiters,
    request_id: Any,
    answer: Any,
    session_digest: bytes,
) -> None:
    """Keep a client's response (``answer``: its result or error) to one of our requests
    for whichever replica waits on it."""
    if not isinstance(request_id, str) or not request_id.startswith(ID_PREFIX):
        return
    try:
        await within(
            DB_TIMEOUT_S,
            elicitation_answers.record_answer(pool, request_id, session_digest, answer),
        )
    except (psycopg.Error, TimeoutError, PoolTimeout):
        # Unrecorded, the wait ends declined at its deadline: nothing runs unconfirmed.
        log.warning("elicitation_answer_lost", exc_info=True)
        return
    waiters.finished(request_id)  # a local waiter: no round trip
