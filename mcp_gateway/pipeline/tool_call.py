"""tools/call: validate → build → call upstream → select → result.

Protocol faults (unknown tool) are JSON-RPC errors; everything the model can
act on is a tool result with ``isError: true`` and the structured error of
shared.engine.errors (docs/architecture.md, "Error codes").

Gates run in this order (docs/architecture.md, "Gate order"): validate →
confirmation (DELETE, or ``safety.confirmation: true``;
mcp_gateway.pipeline.confirmation) → approval (the call becomes a pending approval row
and answers ``approval_required``, or a repeat gets a finished approval's outcome
once; mcp_gateway.approvals.requests; a client that sent a progress token over SSE may
wait on the open call for the decision, mcp_gateway.pipeline.approval_wait) → the
upstream step (``CompiledOperation.call``), where an operation with
``execution_config.idempotency`` goes through the idempotency memory
(mcp_gateway.pipeline.idempotency). The gates and the step take a ``ToolCallContext``
(mcp_gateway.pipeline.context), built here once per call.

Every call of a known tool, success or tool error, leaves one call log row
(buffered) and counts in the per-tool metrics (mcp_gateway.pipeline.accounting);
a plain call makes no database round trip, while the safety gates write their
rows before going on. An unknown tool is a protocol error and leaves neither.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import structlog

from mcp_gateway.approvals.outcomes import delivered
from mcp_gateway.approvals.requests import request_approval
from mcp_gateway.catalog.snapshot import Tool
from mcp_gateway.pipeline import confirmation
from mcp_gateway.pipeline import idempotency as idempotency_memory
from mcp_gateway.pipeline.accounting import account_call
from mcp_gateway.pipeline.approval_wait import ApprovalWait
from mcp_gateway.pipeline.context import ToolCallContext
from mcp_gateway.pipeline.results import TRUNCATED_META, success_result, tool_result
from mcp_gateway.transport.exchange import Exchange
from mcp_gateway.transport.jsonrpc import INVALID_PARAMS, Message, encode, error, result
from shared.engine.compiler import confirmation_token
from shared.engine.errors import ToolError
from shared.engine.request_builder import BuiltRequest
from shared.engine.upstream import UpstreamCall, UpstreamFailure

log = structlog.get_logger(__name__)


async def _execute(
    ctx: ToolCallContext, tool: Tool, arguments: Any, upstream: UpstreamCall, *, wrap_arrays: bool
) -> dict[str, Any]:
    compiled = tool.compiled
    cleaned = compiled.validate(arguments)
    if tool.spec.confirmation_required():
        await confirmation.check(ctx, tool, cleaned, confirmation_token(arguments))
    built = compiled.build(cleaned, ctx.agent.secrets)
    if tool.spec.safety.approval:
        answer = await request_approval(ctx, tool, cleaned, built, wrap_arrays=wrap_arrays)
        if ctx.approval_wait is None or delivered(answer) is not None:
            return answer
        return await ctx.approval_wait.answer(
            answer, lambda: request_approval(ctx, tool, cleaned, built, wrap_arrays=wrap_arrays)
        )
    idempotency = tool.spec.execution_config.idempotency
    if idempotency is not None:
        return await idempotency_memory.run(
            ctx,
            tool,
            cleaned,
            str(cleaned[idempotency.argument]),
            # Unwrapped: the memory stores one result for both eras and wraps it itself.
            lambda: _send(ctx, tool, built, upstream, wrap_arrays=False),
            wrap_arrays=wrap_arrays,
        )
    return await _send(ctx, tool, built, upstream, wrap_arrays=wrap_arrays)


async def _send(
    ctx: ToolCallContext,
    tool: Tool,
    built: BuiltRequest,
    upstream: UpstreamCall,
    *,
    wrap_arrays: bool,
) -> dict[str, Any]:
    selected = await tool.compiled.call(ctx.executor, built, upstream, egress=ctx.agent.egress)
    log.info(
        "tool_called",
        tool=tool.name,
        version=tool.version,
        status=upstream.status,
        attempts=upstream.attempts,
        elapsed_ms=upstream.elapsed_ms,
    )
    meta = {TRUNCATED_META: True} if selected.truncated else None
    return success_result(selected.value, wrap_arrays=wrap_arrays, meta=meta)


def _context(call: Exchange, message: Message) -> ToolCallContext:
    state, settings = call.state, call.state.settings
    return ToolCallContext(
        agent=call.agent,
        key_id=call.key.id,
        request_id=call.request_id,
        language=settings.language,
        pool=state.pool,
        executor=state.executor,
        confirmations=state.confirmations,
        approval_ttl_s=settings.approval_ttl_s,
        approval_max_attempts=settings.approval_max_attempts,
        approval_outcome_retention_s=settings.approval_outcome_retention_s,
        public_path_prefix=settings.public_path_prefix,
        idempotency_retention_s=settings.idempotency_retention_s,
        approval_wait=ApprovalWait.plan(call, message),
    )


async def tools_call(call: Exchange, message: Message, *, modern: bool) -> bytes:
    """The JSON-RPC response to one tools/call."""
    name = message.params.get("name")
    tool = call.agent.by_name.get(name) if isinstance(name, str) else None
    if tool is None:
        # -32602 in HTTP 200: clients read a 404 on POST as "session gone".
        return encode(error(message.id, INVALID_PARAMS, f"Unknown tool: {name}"))
    ctx = _context(call, message)
    called_at = datetime.now(UTC)
    started = time.perf_counter()
    upstream = UpstreamCall()
    outcome: str = "ok"
    approval_id: str | None = None
    try:
        value = await _execute(
            ctx, tool, message.params.get("arguments") or {}, upstream, wrap_arrays=not modern
        )
        if tool.spec.safety.approval:  # the gate answered; the worker calls the upstream later
            outcome, approval_id = delivered(value) or (
                "approval_required",
                value["structuredContent"]["approval_id"],
            )
    except ToolError as exc:
        exc.request_id = ctx.request_id
        outcome = exc.error_code
        if isinstance(exc, UpstreamFailure):
            log.info(
                "tool_call_failed",
                tool=tool.name,
                error_code=outcome,
                attempts=upstream.attempts,
                reason=exc.details.get("reason"),  # masked; e.g. which host egress refused
            )
        replayed = isinstance(exc, idempotency_memory.ReplayedError)
        meta = {idempotency_memory.REPLAYED_META: True} if replayed else None
        value = tool_result(exc.to_structured(), is_error=True, meta=meta)
    except Exception:
        log.exception("tool_call_crashed", tool=tool.name)
        outcome = "internal_error"
        failure = ToolError.of("internal_error", language=ctx.language, request_id=ctx.request_id)
        value = tool_result(failure.to_structured(), is_error=True, meta=None)
    agent = ctx.agent
    account_call(
        call.state.call_log,
        workspace=agent.workspace,
        agent=agent.slug,
        workspace_id=agent.workspace_id,
        agent_id=agent.id,
        key_id=ctx.key_id,
        request_id=ctx.request_id,
        tool=tool.name,
        tool_version=tool.version,
        outcome=outcome,
        upstream=upstream,
        called_at=called_at,
        duration_ms=(time.perf_counter() - started) * 1000,
        approval_id=approval_id,
    )
    if modern:
        value["resultType"] = "complete"
    return encode(result(message.id, value))
