"""The approval gate of tools/call: a pending row instead of the upstream call.

``request_approval`` delivers the call's finished, undelivered outcome once, else finds
or inserts the call's active approval (docs/architecture.md, "Approval outcomes").
"""

from __future__ import annotations

from typing import Any

import structlog

from mcp_gateway.approvals import store
from mcp_gateway.catalog.snapshot import Tool
from mcp_gateway.pipeline.context import ToolCallContext
from mcp_gateway.pipeline.outcomes import Delivered, PendingApproval, delivered
from shared.engine.canonical import arguments_hash
from shared.engine.errors import invalid_arguments
from shared.engine.request_builder import BuiltRequest

log = structlog.get_logger(__name__)

_ROUNDS = 5  # an active row can finish between the insert and the look-up; try again


class ApprovalRace(RuntimeError):
    """The active row kept changing under us (never seen in practice)."""


async def request_approval(
    ctx: ToolCallContext,
    tool: Tool,
    arguments: dict[str, Any],
    built: BuiltRequest,
) -> PendingApproval | Delivered:
    """A new or the existing active approval, or the undelivered outcome of the call's
    finished one; raises ``invalid_arguments`` for arguments the approvals table
    cannot hold."""
    agent = ctx.agent
    unstorable = store.nul_path(arguments)
    if unstorable is not None:
        explanation = "NUL characters (\\u0000) cannot be held for approval"
        raise invalid_arguments([(unstorable, "nul", explanation)], language=ctx.language)
    new = store.NewApproval(
        workspace_id=agent.workspace_id,
        agent_id=agent.id,
        operation_id=tool.operation_id,
        key_id=ctx.requester.key_id,
        tool=tool.name,
        version=tool.version,
        arguments=arguments,
        arguments_hash=arguments_hash(arguments),
        request=built.redacted(),
        ttl_s=ctx.parts.settings.approval_ttl_s,
        max_attempts=ctx.parts.settings.approval_max_attempts,
        person=ctx.requester.recorded,  # never the token (docs/architecture.md, "Identity")
    )
    async with ctx.pool.connection() as conn:
        for _ in range(_ROUNDS):
            finished = await store.claim_outcome(
                conn, new, ctx.parts.settings.approval_outcome_retention_s
            )
            if finished is not None:
                log.info("approval_outcome_delivered", approval_id=finished.id, tool=tool.name)
                return delivered(finished, ctx.language)
            approval_id = await store.insert_unless_active(
                conn, new, ctx.parts.settings.approval_outcome_retention_s
            )
            if approval_id is None:
                found = await store.find_active(conn, new)
                if found is None:
                    continue  # it finished in between: its outcome is next
                approval_id, overdue = found
                if overdue:
                    await store.expire(conn, agent.id, approval_id)
                    continue  # expired now: the outcome approval_expired is next
            return PendingApproval(approval_id)
    raise ApprovalRace(f"no stable active approval for {tool.name} after {_ROUNDS} rounds")
