"""tools/call: validate → build → call upstream → select → result.

Protocol faults (unknown tool) are JSON-RPC errors; everything the model can
act on is a tool result with ``isError: true`` and the structured error of
shared.engine.errors (docs/architecture.md, "Error codes").

Gates run in this order (docs/architecture.md, "Gate order"): validate →
confirmation (DELETE, or ``safety.confirmation: true``; a ``ct_`` token,
mcp_gateway.pipeline.confirmation, or for a 2026-07-28 client that declares
elicitation the human's answer to a form, mcp_gateway.pipeline.elicitation, or
for a 2025 one an elicitation/create on the call's stream,
mcp_gateway.pipeline.elicitation_stream) →
approval (the call becomes a pending approval row and answers
``approval_required``, or a repeat gets a finished approval's outcome once;
mcp_gateway.approvals.requests; a client that sent a progress token over SSE may
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

import msgspec
import structlog

from mcp_gateway.approvals.outcomes import delivered
from mcp_gateway.approvals.requests import request_approval
from mcp_gateway.approvals.tasks import created as approval_task
from mcp_gateway.approvals.tasks import declares_tasks
from mcp_gateway.catalog.snapshot import Tool
from mcp_gateway.pipeline import confirmation, elicitation, elicitation_stream
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
    ctx: ToolCallContext,
    tool: Tool,
    arguments: Any,
    upstream: UpstreamCall,
    *,
    wrap_arrays: bool,
    human: Human,
) -> dict[str, Any]:
    compiled = tool.compiled
    cleaned = compiled.validate(arguments)
    if tool.spec.confirmation_required():
        if human is None:
            await confirmation.check(ctx, tool, cleaned, confirmation_token(arguments))
        elif isinstance(human, _AsksOnStream):  # a 2025 client: on this call's SSE stream
            await elicitation_stream.ask(ctx, tool, cleaned, human.exchange, human.session)
        else:  # asked of the human through the client; no ct_ token (docs/architecture.md, "DELETE confirmation")
            asking = await elicitation.confirm(ctx, tool, cleaned, human.answer)
            if asking is not None:
                return asking
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


class _AsksHuman(msgspec.Struct, frozen=True):
    answer: elicitation.Answer | None  # None: the first call, or a retry without a state


class _AsksOnStream(msgspec.Struct, frozen=True):
    exchange: Exchange  # the open tools/call, whose SSE answer carries elicitation/create
    session: bytes  # the session's hash: the answer must come from it


Human = _AsksHuman | _AsksOnStream | None  # None: the ct_ token flow


def _human(call: Exchange, message: Message, tool: Tool, *, modern: bool) -> Human:
    """The elicitation channel when this call's confirmation goes to the human;
    raises MalformedAnswer for a retry whose inputResponses is not of the spec's shape."""
    if not tool.spec.confirmation_required():
        return None
    if not modern:  # (docs/architecture.md, "Asking the human in the 2025 era")
        session = call.elicitation_session
        if session is None or not call.sse_ok or call.agent.confirmation_mode != "auto":
            return None
        return _AsksOnStream(call, session)
    if not elicitation.asks_human(message.params.get("_meta"), call.agent.confirmation_mode):
        return None
    return _AsksHuman(elicitation.read_answer(message.params))


def _context(call: Exchange, message: Message, *, may_wait: bool) -> ToolCallContext:
    state, settings = call.state, call.state.settings
    return ToolCallContext(
        agent=call.agent,
        key_id=call.key.id,
        request_id=call.request_id,
        language=settings.language,
        pool=state.pool,
        executor=state.executor,
        confirmations=state.confirmations,
        request_states=state.request_states,
        approval_ttl_s=settings.approval_ttl_s,
        approval_max_attempts=settings.approval_max_attempts,
        approval_outcome_retention_s=settings.approval_outcome_retention_s,
        public_path_prefix=settings.public_path_prefix,
        idempotency_retention_s=settings.idempotency_retention_s,
        approval_wait=ApprovalWait.plan(call, message) if may_wait else None,
    )


async def tools_call(call: Exchange, message: Message, *, modern: bool) -> bytes:
    """The JSON-RPC response to one tools/call."""
    name = message.params.get("name")
    tool = call.agent.by_name.get(name) if isinstance(name, str) else None
    if tool is None:
        # -32602 in HTTP 200: clients read a 404 on POST as "session gone".
        if call.trace is not None:
            call.trace.rpc_error(INVALID_PARAMS, "unknown tool")
        return encode(error(message.id, INVALID_PARAMS, f"Unknown tool: {name}"))
    try:
        human = _human(call, message, tool, modern=modern)
    except elicitation.MalformedAnswer as exc:
        return encode(error(message.id, INVALID_PARAMS, str(exc)))
    # A client that follows a task polls it instead of waiting on the open call
    # (docs/architecture.md, "Tasks").
    as_task = modern and declares_tasks(message.params.get("_meta"))
    ctx = _context(call, message, may_wait=not as_task)
    called_at = datetime.now(UTC)
    started = time.perf_counter()
    upstream = UpstreamCall()
    outcome: str = "ok"
    approval_id: str | None = None
    try:
        value = await _execute(
            ctx,
            tool,
            # Absent or null is no arguments; anything else not an object (``[]``,
            # ``false``, ``""``) is invalid_arguments, never taken for ``{}``.
            message.params.get("arguments"),
            upstream,
            wrap_arrays=not modern,
            human=human,
        )
        if value.get("resultType") == "input_required":  # the human is being asked
            outcome = "confirmation_required"
        elif tool.spec.safety.approval:  # the gate answered; the worker calls the upstream later
            outcome, approval_id = delivered(value) or (
                "approval_required",
                value["structuredContent"]["approval_id"],
            )
            if as_task and outcome == "approval_required":
                # A task instead of the seed's structure (docs/architecture.md, "Tasks").
                value = await approval_task(ctx, str(approval_id))
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
    if call.trace is not None:
        call.trace.tool_call(
            tool.name, tool.version, outcome, approval_id, value.get("isError") is True
        )
    if modern:
        value.setdefault("resultType", "complete")
    return encode(result(message.id, value))
