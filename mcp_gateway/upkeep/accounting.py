"""A finished tool call → one call log row (buffered) and the per-tool metrics.

Both paths that call an upstream on an agent's behalf account here, and the
row is built here only: tools/call (mcp_gateway.pipeline.calls) and the approval
worker running an approved call (mcp_gateway.approvals.execution), whose rows
carry the approval id.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import msgspec

from mcp_gateway.upkeep.call_log import CallLogWriter, CallRecord
from mcp_gateway.upkeep.metrics import agent_label, observe_tool_call
from shared.engine.upstream import UpstreamCall
from shared.principals import PrincipalRecord


class Caller(msgspec.Struct, frozen=True):
    """On whose behalf a call runs: the agent (ids, and slugs for the metric label)
    and who asked: the key, or the person a token named. ``person`` is the recorded
    part of the principal only, since an approved call rebuilds it from its approval
    row, which keeps no token, groups or scopes (docs/architecture.md, "Identity")."""

    workspace_id: int
    agent_id: int
    workspace: str
    agent: str
    key_id: int | None
    person: PrincipalRecord | None = None  # who signed in, when a token authenticated


class CallClock(msgspec.Struct, frozen=True):
    """Started with the call: when it began, and what its upstream step measures
    (a Struct: built on every call; ``CallClock.now()`` makes one)."""

    called_at: datetime
    started: float  # time.perf_counter()
    upstream: UpstreamCall

    @classmethod
    def now(cls) -> CallClock:
        return cls(datetime.now(UTC), time.perf_counter(), UpstreamCall())


def account_call(
    call_log: CallLogWriter,
    caller: Caller,
    clock: CallClock,
    *,
    request_id: str,
    tool: str,
    version: int | None,
    outcome: str,
    approval_id: str | None,
) -> None:
    """``outcome``: "ok", an error code, or the approval outcomes of the call log."""
    upstream = clock.upstream
    person = caller.person
    upstream_ms = upstream.elapsed_ms
    observe_tool_call(
        agent_label(caller.workspace, caller.agent),
        tool,
        outcome,
        None if upstream_ms is None else upstream_ms / 1000,
    )
    call_log.record(
        CallRecord(
            called_at=clock.called_at,
            workspace_id=caller.workspace_id,
            agent_id=caller.agent_id,
            key_id=caller.key_id,
            request_id=request_id,
            tool=tool,
            tool_version=version,
            outcome=outcome,
            upstream_status=upstream.status,
            attempts=upstream.attempts,
            duration_ms=(time.perf_counter() - clock.started) * 1000,
            upstream_ms=upstream_ms,
            approval_id=approval_id,
            principal_issuer=None if person is None else person.issuer,
            principal_subject=None if person is None else person.subject,
            principal_name=None if person is None else person.name,
            client_id=None if person is None else person.client_id,
        )
    )
