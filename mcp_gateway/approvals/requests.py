# ruff: noqa: RUF001 - the Russian text is Cyrillic on purpose
"""The approval gate of tools/call: a pending row instead of the upstream call.

The first call of an operation with ``safety.approval: true`` stores the
approval (agent, operation, version, canonical arguments, the resolved
request with secrets masked) and answers the seed's ``approval_required``
structure; a repeat of the same call (same agent, operation, version and
RFC 8785 canonical arguments) answers the same structure for the row that is
still active. Concurrent identical calls on any replicas meet at the
database's unique index ``approvals_one_active``: one inserts, the others
find its row. A pending row past its time is expired on the way.

When the call's latest approval has finished and its outcome was not yet
delivered (and finished within ``CRANK_APPROVAL_OUTCOME_RETENTION_S``), the
repeat gets that outcome instead (mcp_gateway.approvals.outcomes), once: the
claim marks it delivered in the same statement, so of concurrent repeats on
any replicas one gets the outcome and the others go on as any call after
the delivery does, asking for a new approval (docs/architecture.md,
"Approval outcomes"). The seed's structure carries a second text block that
tells the model, in plain words, to call again with the same arguments for
the outcome.

Arguments with a NUL character anywhere (a string or a key) are refused as
``invalid_arguments`` naming the argument: jsonb cannot store U+0000.
"""

from __future__ import annotations

from typing import Any

import structlog

from mcp_gateway.approvals import store
from mcp_gateway.approvals.outcomes import outcome_result
from mcp_gateway.catalog.snapshot import Tool
from mcp_gateway.pipeline.context import ToolCallContext
from mcp_gateway.pipeline.results import tool_result
from shared.engine.canonical import arguments_hash
from shared.engine.errors import Language, invalid_arguments
from shared.engine.request_builder import BuiltRequest
from shared.public_urls import approvals_path

log = structlog.get_logger(__name__)

_ROUNDS = 5  # an active row can finish between the insert and the look-up; try again


class ApprovalRace(RuntimeError):
    """The active row kept changing under us (never seen in practice)."""


def approval_required(prefix: str, workspace: str, agent: str, approval_id: str) -> dict[str, Any]:
    """The seed's structure, URLs as server paths (``/v1/...``) behind ``prefix``."""
    url = f"{approvals_path(prefix, workspace, agent)}/{approval_id}"
    return {
        "status": "approval_required",
        "approval_id": approval_id,
        "approval_url": url,
        "approve": {"method": "POST", "url": f"{url}/approve", "body": {"approve": "yes"}},
        "deny": {"method": "POST", "url": f"{url}/deny", "body": {"approve": "no"}},
    }


# What the model reads beside the structure: the structure is the seed's, to the letter.
_CALL_AGAIN: dict[Language, str] = {
    "en": (
        "A human must approve this call before it runs; nothing has been done yet. "
        "Call this tool again with the same arguments to get the outcome: "
        "until someone decides, the same approval comes back."
    ),
    "ru": (
        "Этот вызов должен подтвердить человек; пока ничего не выполнено. "
        "Повторите вызов этого инструмента с теми же аргументами, чтобы получить результат: "
        "пока решения нет, вернётся эта же заявка."
    ),
}


def approval_required_result(structure: dict[str, Any], language: Language) -> dict[str, Any]:
    """The tool result of an ``approval_required`` answer: the structure and its JSON text,
    then the plain words."""
    result = tool_result(structure, is_error=False, meta=None)
    result["content"].append({"type": "text", "text": _CALL_AGAIN[language]})
    return result


async def request_approval(
    ctx: ToolCallContext,
    tool: Tool,
    arguments: dict[str, Any],
    built: BuiltRequest,
    *,
    wrap_arrays: bool,
) -> dict[str, Any]:
    """The tool result for a new or the existing active approval (``approval_required``),
    or the undelivered outcome of the call's finished one; ``invalid_arguments`` for
    arguments the approvals table cannot hold."""
    agent = ctx.agent
    unstorable = store.nul_path(arguments)
    if unstorable is not None:
        explanation = "NUL characters (\\u0000) cannot be held for approval"
        raise invalid_arguments([(unstorable, "nul", explanation)], language=ctx.language)
    new = store.NewApproval(
        workspace_id=agent.workspace_id,
        agent_id=agent.id,
        operation_id=tool.operation_id,
        key_id=ctx.key_id,
        tool=tool.name,
        version=tool.version,
        arguments=arguments,
        arguments_hash=arguments_hash(arguments),
        request=built.redacted(),
        ttl_s=ctx.approval_ttl_s,
        max_attempts=ctx.approval_max_attempts,
    )
    async with ctx.pool.connection() as conn:
        for _ in range(_ROUNDS):
            finished = await store.claim_outcome(conn, new, ctx.approval_outcome_retention_s)
            if finished is not None:
                log.info("approval_outcome_delivered", approval_id=finished.id, tool=tool.name)
                return outcome_result(
                    finished,
                    language=ctx.language,
                    request_id=ctx.request_id,
                    wrap_arrays=wrap_arrays,
                )
            approval_id = await store.insert_unless_active(
                conn, new, ctx.approval_outcome_retention_s
            )
            if approval_id is None:
                found = await store.find_active(conn, new)
                if found is None:
                    continue  # it finished in between: its outcome is next
                approval_id, overdue = found
                if overdue:
                    await store.expire(conn, agent.id, approval_id)
                    continue  # expired now: the outcome approval_expired is next
            structure = approval_required(
                ctx.public_path_prefix, agent.workspace, agent.slug, approval_id
            )
            return approval_required_result(structure, ctx.language)
    raise ApprovalRace(f"no stable active approval for {tool.name} after {_ROUNDS} rounds")
