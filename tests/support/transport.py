"""The gateway's transport in process: the MCP endpoint and the approval-key endpoints
called as ASGI handlers over a hand-built snapshot, with a real key resolver and a real
database pool (key look-ups, approval rows), and no gateway process."""

from __future__ import annotations

import time
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, cast

from psycopg_pool import AsyncConnectionPool

from mcp_gateway.app import MCP_PATH
from mcp_gateway.catalog.keys import KeyResolver
from mcp_gateway.catalog.snapshot import Agent, Key, Snapshot
from mcp_gateway.sessions.signer import SessionSigner
from mcp_gateway.transport import approval_endpoints, endpoint
from mcp_gateway.transport.asgi import Message
from mcp_gateway.transport.body_reads import BodyReads
from mcp_gateway.transport.rate_limits import RateLimiter
from mcp_gateway.transport.state import GatewayState
from mcp_gateway.upkeep.health import DatabaseHealth
from shared.crypto import KeyHasher
from shared.db import Connection
from shared.keys import KeyKind, generate_key
from shared.last_use import LastUseRecorder
from shared.settings import Settings
from tests.support.db import TEST_SECRET_KEY

ALLOWED_ORIGIN = "https://approve.example.com"
MAX_BODY_BYTES = 256
# Agents of workspace "default": (id, slug, published).
AGENTS = ((1, "sales", True), (2, "other", True), (3, "draft", False))


@dataclass
class _Catalog:
    """What the transport reads of mcp_gateway.catalog.refresher.Refresher."""

    snapshot: Snapshot


@dataclass
class Transport:
    state: GatewayState
    tokens: dict[tuple[str, str], str]  # (agent slug, key kind) -> a key of that agent and kind

    def key(self, slug: str, kind: str) -> str:
        return self.tokens[(slug, kind)]


def build_transport(
    pool: AsyncConnectionPool[Connection], *, keys_reachable: bool = True
) -> Transport:
    """Every agent of ``AGENTS`` with an agent key and an approval key in the snapshot.
    ``keys_reachable`` False: a key the snapshot lacks cannot be looked up (503)."""
    hasher = KeyHasher(TEST_SECRET_KEY)
    agents: dict[tuple[str, str], Agent] = {}
    keys: dict[bytes, Key] = {}
    tokens: dict[tuple[str, str], str] = {}
    for agent_id, slug, published in AGENTS:
        agents[("default", slug)] = Agent(agent_id, 1, "default", slug, published)
        for offset, kind in enumerate((KeyKind.AGENT, KeyKind.APPROVAL)):
            token = generate_key(kind)
            tokens[(slug, kind.value)] = token
            keys[hasher.hash(token)] = Key(agent_id * 10 + offset, kind.value, agent_id, None)
    snapshot = Snapshot(1, time.monotonic(), agents, {a.id: a for a in agents.values()}, keys)
    health = DatabaseHealth()
    health.reachable = True
    settings = Settings(
        secret_key=TEST_SECRET_KEY,
        allowed_origins=(ALLOWED_ORIGIN,),
        max_body_bytes=MAX_BODY_BYTES,
        rate_limit="off",
    )
    unused: Any = None  # parts the transport does not reach before tools/call
    state = GatewayState(
        settings=settings,
        pool=pool,
        catalog=cast(Any, _Catalog(snapshot)),
        health=health,
        keys=KeyResolver(hasher, pool, database_reachable=lambda: keys_reachable),
        sessions=SessionSigner(TEST_SECRET_KEY, settings.mcp_session_ttl_s),
        ended_sessions=cast(Any, SimpleNamespace(ended={})),
        streams=unused,
        pipeline=unused,
        approvals=unused,
        key_use=LastUseRecorder("api_keys"),
        replicas=unused,
        limiter=RateLimiter(lambda: (0, 1)),
        body_reads=BodyReads(settings.mcp_body_timeout_s, settings.mcp_unfinished_bodies_per_key),
        default_rate_limit=None,
    )
    return Transport(state, tokens)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes


async def call(
    state: GatewayState,
    method: str,
    path: str,
    headers: dict[str, str] | None = None,
    body: bytes = b"",
) -> Answer:
    """One request to the handler that ``mcp_gateway.app`` routes ``path`` to."""
    scope: dict[str, Any] = {
        "type": "http",
        "method": method,
        "path": path,
        "query_string": b"",
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }
    sent: list[Message] = []
    received = False

    async def receive() -> Message:
        nonlocal received
        if received:
            return {"type": "http.disconnect"}
        received = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        sent.append(message)

    if mcp := MCP_PATH.fullmatch(path):
        await endpoint.handle(state, scope, receive, send, mcp[1], mcp[2])
    else:
        approvals = approval_endpoints.PATH.fullmatch(path)
        assert approvals is not None, path
        await approval_endpoints.handle(state, scope, receive, send, approvals)
    start = sent[0]
    answer_headers = {k.decode(): v.decode() for k, v in start["headers"]}
    payload = b"".join(m.get("body", b"") for m in sent[1:])
    return Answer(start["status"], answer_headers, payload)
