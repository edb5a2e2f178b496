"""A finished tool call → one call log row (buffered) and the per-tool metrics.

Both paths that call an upstream on an agent's behalf account here with the
record they built once: tools/call (mcp_gateway.pipeline.calls) and the approval
worker running an approved call (mcp_gateway.approvals.execution), whose rows
carry the approval id.
"""

from __future__ import annotations

from mcp_gateway.upkeep.call_log import CallLogWriter, CallRecord
from mcp_gateway.upkeep.metrics import agent_label, observe_tool_call


def account_call(
    call_log: CallLogWriter, record: CallRecord, *, workspace: str, agent: str
) -> None:
    """``workspace`` and ``agent`` are slugs, for the metric label."""
    upstream_ms = record.upstream_ms
    observe_tool_call(
        agent_label(workspace, agent),
        record.tool,
        record.outcome,
        None if upstream_ms is None else upstream_ms / 1000,
    )
    call_log.record(record)
