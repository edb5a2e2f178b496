"""What one tools/call hands its safety gates and its upstream step.

Built once per call by mcp_gateway.pipeline.tool_call from the authenticated request
and the process state, so that the gates (mcp_gateway.pipeline.confirmation,
mcp_gateway.approvals.requests, mcp_gateway.pipeline.idempotency) depend on these few
values and not on the request object or the whole process state.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.catalog.snapshot import Agent
from mcp_gateway.pipeline.confirmation_tokens import ConfirmationSigner
from shared.db import Connection
from shared.engine.errors import Language
from shared.engine.outbound import UpstreamExecutor

if TYPE_CHECKING:  # the wait reaches the transport, which imports this module's users
    from mcp_gateway.pipeline.approval_wait import ApprovalWait


# A frozen msgspec Struct, not a dataclass: built on every tools/call, and a frozen
# dataclass of this size costs several microseconds to build.
class ToolCallContext(msgspec.Struct, frozen=True, kw_only=True):
    """The values the gates and the upstream step take; built once per tools/call."""

    agent: Agent
    key_id: int
    request_id: str
    language: Language
    pool: AsyncConnectionPool[Connection]
    executor: UpstreamExecutor
    confirmations: ConfirmationSigner  # ct_ tokens
    request_states: ConfirmationSigner  # the requestState of a confirmation asked of the human
    approval_ttl_s: int  # CRANK_APPROVAL_TTL_S
    approval_max_attempts: int  # CRANK_APPROVAL_MAX_ATTEMPTS
    approval_outcome_retention_s: int  # CRANK_APPROVAL_OUTCOME_RETENTION_S
    public_path_prefix: str  # CRANK_PUBLIC_PATH_PREFIX, for the approval URLs
    idempotency_retention_s: int  # CRANK_IDEMPOTENCY_RETENTION_S
    # Set when the call may wait on its open SSE answer for its approval's decision.
    approval_wait: ApprovalWait | None = None
