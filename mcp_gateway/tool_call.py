"""tools/call: validate → build → call upstream → select → result.

Protocol faults (unknown tool) are JSON-RPC errors; everything the model can
act on is a tool result with ``isError: true`` and the structured error of
shared.errors (STYLE "Errors").

Gates run in DESIGN's order: validate → confirmation (DELETE, or
``safety.confirmation: true``; mcp_gateway.confirmation) → approval (the call
becomes a pending approval row and answers ``approval_required``;
mcp_gateway.approvals) → execution, where an operation with
``execution_config.idempotency`` goes through the idempotency memory
(mcp_gateway.idempotency).

Every call of a known tool, success or tool error, leaves one call log row
(mcp_gateway.call_log, buffered) and counts in the per-tool metrics; a plain
call makes no database round trip, while the safety gates write their rows
before going on. An unknown tool is a protocol error and leaves neither.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

import structlog

from mcp_gateway import approvals, confirmation
from mcp_gateway import idempotency as idempotency_memory
from mcp_gateway.call_log import CallRecord
from mcp_gateway.exchange import Exchange
from mcp_gateway.jsonrpc import INVALID_PARAMS, Message, encode, error, result
from mcp_gateway.metrics import agent_label, observe_tool_call
from mcp_gateway.snapshot import Tool
from mcp_gateway.tools import tool_result
from shared.compiler import confirmation_token
from shared.errors import ErrorCode, ToolError
from shared.outbound import OutboundError
from shared.request_builder import BuiltRequest
from shared.response_selector import structured_content

log = structlog.get_logger(__name__)

TRUNCATED_META = "crank/truncated"


@dataclass(slots=True)
class _Upstream:
    """What the upstream part of one call measured, for the call log and metrics."""

    status: int | None = None  # None: no HTTP answer
    attempts: int = 0
    elapsed_ms: float | None = None  # None: the upstream was not called


async def _execute(
    call: Exchange, tool: Tool, arguments: Any, upstream: _Upstream, *, wrap_arrays: bool
) -> dict[str, Any]:
    compiled = tool.compiled
    cleaned = compiled.validate(arguments)
    if tool.spec.confirmation_required():
        await confirmation.check(call, tool, cleaned, confirmation_token(arguments))
    built = compiled.build(cleaned, call.agent.secrets)
    if tool.spec.safety.approval:
        return tool_result(
            await approvals.request_approval(call, tool, cleaned, built), is_error=False, meta=None
        )
    idempotency = tool.spec.execution_config.idempotency
    if idempotency is not None:
        return await idempotency_memory.run(
            call,
            tool,
            cleaned,
            str(cleaned[idempotency.argument]),
            # Unwrapped: the memory stores one result for both eras and wraps it itself.
            lambda: _send(call, tool, built, upstream, wrap_arrays=False),
            wrap_arrays=wrap_arrays,
        )
    return await _send(call, tool, built, upstream, wrap_arrays=wrap_arrays)


async def _send(
    call: Exchange, tool: Tool, built: BuiltRequest, upstream: _Upstream, *, wrap_arrays: bool
) -> dict[str, Any]:
    compiled = tool.compiled
    started = time.perf_counter()
    try:
        response = await call.state.executor.execute(compiled.upstream_request(built))
    except OutboundError as exc:
        upstream.attempts = exc.attempts
        upstream.elapsed_ms = (time.perf_counter() - started) * 1000
        raise
    upstream.status = response.status
    upstream.attempts = response.attempts
    upstream.elapsed_ms = response.elapsed_ms
    selected = compiled.select(
        response.status, response.headers, response.body, secret_values=built.secret_values
    )
    log.info(
        "tool_called",
        tool=tool.name,
        version=tool.version,
        status=response.status,
        attempts=response.attempts,
        elapsed_ms=response.elapsed_ms,
    )
    meta = {TRUNCATED_META: True} if selected.truncated else None
    content = structured_content(selected.value, wrap_arrays=wrap_arrays)
    return tool_result(content, is_error=False, meta=meta)


async def tools_call(call: Exchange, message: Message, *, modern: bool) -> bytes:
    """The JSON-RPC response to one tools/call."""
    name = message.params.get("name")
    tool = call.agent.by_name.get(name) if isinstance(name, str) else None
    if tool is None:
        # -32602 in HTTP 200: clients read a 404 on POST as "session gone".
        return encode(error(message.id, INVALID_PARAMS, f"Unknown tool: {name}"))
    language = call.state.settings.language
    called_at = datetime.now(UTC)
    started = time.perf_counter()
    upstream = _Upstream()
    outcome: str = "ok"
    try:
        value = await _execute(
            call, tool, message.params.get("arguments") or {}, upstream, wrap_arrays=not modern
        )
        if tool.spec.safety.approval:  # the gate answered; the worker calls the upstream later
            outcome = "approval_required"
    except ToolError as exc:
        exc.request_id = call.request_id
        outcome = exc.error_code
        replayed = isinstance(exc, idempotency_memory.ReplayedError)
        meta = {idempotency_memory.REPLAYED_META: True} if replayed else None
        value = tool_result(exc.to_structured(), is_error=True, meta=meta)
    except OutboundError as exc:
        code = cast(ErrorCode, exc.code)
        outcome = code
        failure = ToolError.of(code, language=language, request_id=call.request_id)
        log.info("tool_call_failed", tool=tool.name, error_code=exc.code, attempts=exc.attempts)
        value = tool_result(failure.to_structured(), is_error=True, meta=None)
    except Exception:
        log.exception("tool_call_crashed", tool=tool.name)
        outcome = "internal_error"
        failure = ToolError.of("internal_error", language=language, request_id=call.request_id)
        value = tool_result(failure.to_structured(), is_error=True, meta=None)
    _account(call, tool, outcome, upstream, called_at, (time.perf_counter() - started) * 1000)
    if modern:
        value["resultType"] = "complete"
    return encode(result(message.id, value))


def _account(
    call: Exchange,
    tool: Tool,
    outcome: str,
    upstream: _Upstream,
    called_at: datetime,
    duration_ms: float,
) -> None:
    """One call log row (buffered) and the per-tool metrics for a finished call."""
    agent = call.agent
    upstream_ms = upstream.elapsed_ms
    observe_tool_call(
        agent_label(agent.workspace, agent.slug),
        tool.name,
        outcome,
        None if upstream_ms is None else upstream_ms / 1000,
    )
    call.state.call_log.record(
        CallRecord(
            called_at=called_at,
            workspace_id=agent.workspace_id,
            agent_id=agent.id,
            key_id=call.key.id,
            request_id=call.request_id,
            tool=tool.name,
            tool_version=tool.version,
            outcome=outcome,
            upstream_status=upstream.status,
            attempts=upstream.attempts,
            duration_ms=duration_ms,
            upstream_ms=upstream_ms,
        )
    )
