"""The DELETE confirmation gate: two calls, a signed single-use token between them.

A DELETE (or any operation with ``safety.confirmation: true``) runs in two
calls (docs/architecture.md, "Gate order"; tool-design.md "Опасные операции"):

1. A call without ``_crank_confirmation_token`` sends nothing upstream and
   answers ``confirmation_required``; the message carries a fresh token
   (mcp_gateway.pipeline.confirmation_tokens: signed, no database needed).
2. The same call with the same arguments plus the token goes on to the next
   gate (approval, if configured) and the upstream.

Using a token inserts the SHA-256 of its bytes into ``confirmation_uses``
(``INSERT ... ON CONFLICT DO NOTHING RETURNING``): of two concurrent uses on
any replicas exactly one gets the row and executes. The row carries the
token's expiry and is pruned after it (mcp_gateway.upkeep.retention).

A 2026-07-28 client that declares elicitation is asked through its user
instead and never gets a token (mcp_gateway.pipeline.elicitation); it shares
``bound_to``, ``mark_used`` and ``invalid`` with this gate.

A token that is malformed, forged, issued for another agent, operation,
version or other arguments, expired (``CRANK_CONFIRMATION_TTL_S``, 300 s by
default) or already used answers ``confirmation_invalid``, whose suggested
action is to call again without the token to get a new one; the reason goes
to the log and ``details``, never to the model. A used token stays used even
when the call then fails upstream: repeating a DELETE needs a new
confirmation.
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
