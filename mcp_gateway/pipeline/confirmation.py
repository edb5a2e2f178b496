"""The DELETE confirmation gate: two calls, a signed single-use token between them.

``check`` answers the first call with a ``ct_`` token and, on the second, verifies it
and marks it used in ``confirmation_uses``; ``bound_to``, ``mark_used`` and ``invalid``
serve the 2026-07-28 elicitation too (docs/architecture.md, "DELETE confirmation";
for authors, tool-design.md "Опасные операции").
"""

from __future__ import annotations

from typing import Any

import structlog

from mcp_gateway.catalog.snapshot import Tool
from mcp_gateway.pipeline.confirmation_tokens import InvalidToken, Reason, TokenUse
from mcp_gateway.pipeline.context import ToolCallContext
from shared.engine.canonical import arguments_hash
from shared.engine.errors import Language, ToolError, confirmation_required

log = structlog.get_logger(__name__)


_USE = """
INSERT INTO confirmation_uses (token_hash, expires_at) VALUES (%s, %s)
ON CONFLICT (token_hash) DO NOTHING
RETURNING true AS first
"""


def invalid(reason: Reason, language: Language) -> ToolError:
    return ToolError.of("confirmation_invalid", language=language, details={"reason": reason})


def bound_to(ctx: ToolCallContext, tool: Tool, arguments: dict[str, Any]) -> dict[str, Any]:
    """What a confirmation is issued for and checked against: this agent, operation
    version and these validated arguments (without the token)."""
    return {
        "agent_id": ctx.agent.id,
        "operation_id": tool.operation_id,
        "version": tool.version,
        "digest": arguments_hash(arguments),
    }


async def mark_used(ctx: ToolCallContext, use: TokenUse) -> bool:
    """Record the use of a verified token or request state; False when any replica
    recorded it before (docs/architecture.md, "DELETE confirmation")."""
    async with ctx.pool.connection() as conn:
        cur = await conn.execute(_USE, (use.token_hash, use.expires_at))
        return await cur.fetchone() is not None


async def check(
    ctx: ToolCallContext, tool: Tool, arguments: dict[str, Any], token: str | None
) -> None:
    """Return when ``token`` is a valid, unused token for exactly this call, after
    marking it used; raise ToolError ``confirmation_required`` (with a fresh
    token) when there is none, ``confirmation_invalid`` when it does not fit.

    ``arguments`` are the validated arguments, without the token."""
    signer = ctx.confirmations
    language = ctx.language
    context = bound_to(ctx, tool, arguments)
    if token is None:
        log.info("confirmation_issued", tool=tool.name, version=tool.version)
        raise confirmation_required(signer.issue(**context), language=language)
    try:
        use = signer.verify(token, **context)
    except InvalidToken as exc:
        log.info("confirmation_refused", tool=tool.name, reason=exc.reason)
        raise invalid(exc.reason, language) from None
    if not await mark_used(ctx, use):
        log.info("confirmation_refused", tool=tool.name, reason="used")
        raise invalid("used", language)
    log.info("confirmation_accepted", tool=tool.name, version=tool.version)
