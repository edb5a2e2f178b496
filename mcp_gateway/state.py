"""What one gateway process holds for its lifetime."""

from __future__ import annotations

from dataclasses import dataclass

from psycopg_pool import AsyncConnectionPool

from mcp_gateway.keys import KeyResolver
from mcp_gateway.refresher import Refresher
from mcp_gateway.sessions import SessionSigner
from mcp_gateway.streams import StreamHub
from shared.db import Connection
from shared.last_use import LastUseRecorder
from shared.outbound import UpstreamExecutor
from shared.settings import Settings


@dataclass(slots=True)
class GatewayState:
    settings: Settings
    pool: AsyncConnectionPool[Connection]
    refresher: Refresher
    keys: KeyResolver
    sessions: SessionSigner
    streams: StreamHub
    key_use: LastUseRecorder
    executor: UpstreamExecutor
