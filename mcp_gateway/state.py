"""What one gateway process holds for its lifetime."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals.waiters import ApprovalWaiters
from mcp_gateway.catalog.keys import KeyResolver
from mcp_gateway.catalog.refresher import Refresher
from mcp_gateway.pipeline.confirmation_tokens import ConfirmationSigner
from mcp_gateway.transport.rate_limits import RateLimiter
from mcp_gateway.transport.sessions import SessionSigner
from mcp_gateway.transport.streams import StreamHub
from mcp_gateway.upkeep.call_log import CallLogWriter
from mcp_gateway.upkeep.replicas import Replicas
from shared.db import Connection
from shared.engine.outbound import UpstreamExecutor
from shared.engine.spec import RateLimit
from shared.last_use import LastUseRecorder
from shared.settings import Settings

if TYPE_CHECKING:  # no import cycle through the approvals package and the call path
    from mcp_gateway.approvals.worker import ApprovalWorker


@dataclass(slots=True)
class GatewayState:
    """Built once in the lifespan; requests read the current snapshot through ``refresher``."""

    settings: Settings
    pool: AsyncConnectionPool[Connection]
    refresher: Refresher
    keys: KeyResolver
    sessions: SessionSigner
    confirmations: ConfirmationSigner  # DELETE confirmation tokens (ct_)
    request_states: ConfirmationSigner  # DELETE confirmations asked of the human (rs_)
    streams: StreamHub
    waiters: ApprovalWaiters  # tools/call answers held open for their approval
    elicitation_waiters: ApprovalWaiters  # 2025 calls waiting for the human's form answer
    key_use: LastUseRecorder
    executor: UpstreamExecutor
    call_log: CallLogWriter  # tools/call rows, written in batches
    replicas: Replicas
    limiter: RateLimiter
    default_rate_limit: RateLimit | None  # CRANK_RATE_LIMIT; an agent's rate_limit wins
    approvals: ApprovalWorker | None = None  # runs approved calls; set once started
