"""What the gateway's HTTP side reads for every request, built whole by the app
(mcp_gateway.app) before the first request and never changed after."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals.worker import ApprovalWorker
from mcp_gateway.catalog.keys import KeyResolver
from mcp_gateway.catalog.refresher import Refresher
from mcp_gateway.pipeline.calls import Pipeline
from mcp_gateway.sessions.signer import SessionSigner
from mcp_gateway.sessions.terminations import Terminations
from mcp_gateway.transport.body_reads import BodyReads
from mcp_gateway.transport.rate_limits import RateLimiter
from mcp_gateway.transport.streams import StreamHub
from mcp_gateway.upkeep.health import DatabaseHealth
from mcp_gateway.upkeep.replicas import Replicas
from shared.db import Connection
from shared.engine.spec import RateLimit
from shared.last_use import LastUseRecorder
from shared.settings import Settings


@dataclass(frozen=True, slots=True)
class GatewayState:
    """Requests read the current snapshot through ``catalog``."""

    settings: Settings
    pool: AsyncConnectionPool[Connection]
    catalog: Refresher
    health: DatabaseHealth
    keys: KeyResolver
    sessions: SessionSigner
    ended_sessions: Terminations
    streams: StreamHub
    pipeline: Pipeline  # tools/call
    approvals: ApprovalWorker  # runs approved calls; the approve endpoint wakes it
    key_use: LastUseRecorder
    replicas: Replicas
    limiter: RateLimiter
    body_reads: BodyReads  # every body read of an authenticated request
    default_rate_limit: RateLimit | None  # CRANK_RATE_LIMIT; an agent's rate_limit wins
