"""tools/call: validate → build → call upstream → select → result.

Protocol faults (unknown tool) are JSON-RPC errors; everything the model can
act on is a tool result with ``isError: true`` and the structured error of
shared.errors (STYLE "Errors"). Operations that need DELETE confirmation or
human approval are refused for now: those gates come with the safety flows.
"""

from __future__ import annotations

from typing import Any, cast

import structlog

from mcp_gateway.call import Call
from mcp_gateway.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, Message, encode, error, result
from mcp_gateway.snapshot import Tool
from shared.errors import ErrorCode, ToolError
from shared.outbound import OutboundError, UpstreamRequest
from shared.response_selector import structured_content

log = structlog.get_logger(__name__)

TRUNCATED_META = "crank/truncated"


def _tool_result(structured: Any, *, is_error: bool, meta: dict[str, Any] | None) -> dict[str, Any]:
    value: dict[str, Any] = {
        "content": [{"type": "text", "text": encode(structured).decode()}],
        "structuredContent": structured,
        "isError": is_error,
    }
    if meta:
        value["_meta"] = meta
    return value


async def _execute(call: Call, tool: Tool, arguments: Any, *, wrap_arrays: bool) -> dict[str, Any]:
    compiled = tool.compiled
    cleaned = compiled.validate(arguments)
    built = compiled.build(cleaned, call.agent.secrets)
    idempotency = tool.spec.execution_config.idempotency
    response = await call.state.executor.execute(
        UpstreamRequest(
            method=built.method,
            url=built.url,
            headers=built.headers,
            body=built.body,
            timeout_ms=tool.spec.execution_config.timeout_ms,
            retries=tool.spec.execution_config.retries,
            idempotency_header=idempotency.header if idempotency else None,
        )
    )
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
    return _tool_result(content, is_error=False, meta=meta)


async def tools_call(call: Call, message: Message, *, modern: bool) -> bytes:
    """The JSON-RPC response to one tools/call."""
    name = message.params.get("name")
    tool = call.agent.by_name.get(name) if isinstance(name, str) else None
    if tool is None:
        # -32602 in HTTP 200: clients read a 404 on POST as "session gone".
        return encode(error(message.id, INVALID_PARAMS, f"Unknown tool: {name}"))
    if tool.spec.confirmation_required() or tool.spec.safety.approval:
        return encode(
            error(
                message.id,
                INTERNAL_ERROR,
                "operations that need confirmation or approval are not available in this build yet",
            )
        )
    language = call.state.settings.language
    try:
        value = await _execute(
            call, tool, message.params.get("arguments") or {}, wrap_arrays=not modern
        )
    except ToolError as exc:
        exc.request_id = call.request_id
        value = _tool_result(exc.to_structured(), is_error=True, meta=None)
    except OutboundError as exc:
        code = cast(ErrorCode, exc.code)
        failure = ToolError.of(code, language=language, request_id=call.request_id)
        log.info("tool_call_failed", tool=tool.name, error_code=exc.code, attempts=exc.attempts)
        value = _tool_result(failure.to_structured(), is_error=True, meta=None)
    except Exception:
        log.exception("tool_call_crashed", tool=tool.name)
        failure = ToolError.of("internal_error", language=language, request_id=call.request_id)
        value = _tool_result(failure.to_structured(), is_error=True, meta=None)
    if modern:
        value["resultType"] = "complete"
    return encode(result(message.id, value))
