"""A finished tool call → one call log row (buffered) and the per-tool metrics.

Both paths that call an upstream on an agent's behalf account here: tools/call
(mcp_gateway.pipeline.tool_call) and the approval worker running an approved call
(mcp_gateway.approvals.execution), whose rows carry the approval id.
"""

from __future__ import annotations

from datetime import datetime

from mcp_gateway.upkeep.call_log import CallLogWriter, CallRecord
from mcp_gateway.upkeep.metrics import agent_label, observe_tool_call
from shared.engine.upstream import UpstreamCall


def account_call(
    call_log: CallLogWriter,
    *,
    workspace: str,
    agent: str,
    workspace_id: int,
    agent_id: int,
    key_id: int | None,
    request_id: str,
    tool: str,
    tool_version: int | None,
    outcome: str,
    upstream: UpstreamCall,
    called_at: datetime,
    duration_ms: float,
    approval_id: str | None = None,
) -> None:
    """``workspace`` and ``agent`` are slugs (the metric label); ``outcome`` is "ok",
    "approval_required" or an error code; ``upstream`` what the upstream step measured."""
    upstream_ms = upstream.elapsed_ms
    observe_tool_call(
        agent_label(workspace, agent),
        tool,
        outcome,
        None if upstream_ms is None else upstream_ms / 1000,
    )
    call_log.record(
        CallRecord(
            called_at=called_at,
            workspace_id=workspace_id,
            agent_id=agent_id,
            key_id=key_id,
            request_id=request_id,
            tool=tool,
            tool_version=tool_version,
            outcome=outcome,
            upstream_status=upstream.status,
            attempts=upstream.attempts,
            duration_ms=duration_ms,
            upstream_ms=upstream_ms,
            approval_id=approval_id,
        )
    )
