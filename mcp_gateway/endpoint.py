"""The MCP endpoint: HTTP checks, auth, then the legacy or the modern era.

Order of checks (DESIGN "Status precedence"): Origin (403) → bearer key (401)
→ workspace and agent published (404) → key of this agent and of kind agent
(403) → HTTP method → protocol era. A request whose ``MCP-Protocol-Version`` is
not a legacy revision goes to the modern (2026-07-28, stateless) handler;
everything else, including no header at all, is the legacy session protocol.
"""

from __future__ import annotations

import os
import secrets
import time
from urllib.parse import urlsplit

import structlog

from mcp_gateway import legacy, modern
from mcp_gateway.asgi import Headers, Receive, Scope, Send, respond
from mcp_gateway.call import LEGACY_VERSIONS, Call
from mcp_gateway.jsonrpc import encode, error
from mcp_gateway.keys import RETRY_AFTER_S, KeyLookupUnavailable
from mcp_gateway.metrics import latency_histogram, requests_counter
from mcp_gateway.state import GatewayState

log = structlog.get_logger(__name__)

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}
_COUNTER_SPAN = 1 << 32


class RequestIds:
    """``req_`` + 16 hex digits: a random per-process prefix (8) and a counter (8).

    Cheaper than ``secrets.token_hex`` per request. Ids are not secrets: they
    only need to be unique across replicas for the call log and error reports.
    A new prefix is drawn when the counter wraps and in a forked child.
    """

    def __init__(self) -> None:
        self._prefix = ""
        self._next = _COUNTER_SPAN  # draws a prefix on first use

    def new(self) -> str:
        if self._next >= _COUNTER_SPAN:
            self._prefix = "req_" + secrets.token_hex(4)
            self._next = 0
        value = self._next
        self._next = value + 1
        return f"{self._prefix}{value:08x}"

    def reset(self) -> None:
        self._next = _COUNTER_SPAN


_request_ids = RequestIds()
os.register_at_fork(after_in_child=_request_ids.reset)


def origin_allowed(origin: str, allowed: tuple[str, ...], *, loopback_ok: bool) -> bool:
    """Browsers send Origin; a page on another site must not reach the gateway
    (DNS rebinding). ``CRANK_ALLOWED_ORIGINS`` are allowed; loopback pages too,
    but only while the gateway itself listens on loopback (a local run)."""
    if origin.rstrip("/") in allowed:
        return True
    host = urlsplit(origin).hostname
    return loopback_ok and host is not None and host in LOOPBACK_HOSTS


async def _plain_error(
    send: Send, status: int, message: str, headers: dict[str, str] | None = None
) -> None:
    requests_counter("-", status).inc()
    await respond(send, status, encode(error(None, _http_code(status), message)), headers=headers)


def _http_code(status: int) -> int:
    return -32600 if status == 400 else -32001


async def handle(
    state: GatewayState, scope: Scope, receive: Receive, send: Send, workspace: str, slug: str
) -> None:
    started = time.perf_counter()
    headers = Headers(scope)
    origin = headers.get("origin")
    loopback_ok = state.settings.host in LOOPBACK_HOSTS
    if origin is not None and not origin_allowed(
        origin, state.settings.allowed_origins, loopback_ok=loopback_ok
    ):
        await _plain_error(send, 403, "Origin not allowed")
        return

    token = bearer(headers)
    snapshot = state.refresher.snapshot
    try:
        key = await state.keys.resolve(token, snapshot) if token else None
    except KeyLookupUnavailable:  # 503, not 401: the key may be valid (mcp_gateway.keys)
        retry = {"Retry-After": str(RETRY_AFTER_S)}
        await _plain_error(send, 503, "cannot check this API key now; retry", retry)
        return
    if key is None:
        await _plain_error(
            send,
            401,
            "missing or invalid API key: send 'Authorization: Bearer <agent_api_key>'",
            {"WWW-Authenticate": "Bearer"},
        )
        return
    agent = snapshot.agents.get((workspace, slug))
    if agent is None or not agent.published:
        await _plain_error(send, 404, f"agent {workspace}/{slug} is not published")
        return
    if key.agent_id != agent.id or key.kind != "agent":
        reason = "an approval key" if key.kind != "agent" else "a key of another agent"
        await _plain_error(send, 403, f"this is {reason}; use the agent's own API key")
        return

    state.key_use.mark(key.id)  # written in batches off the hot path
    call = Call(state, scope, receive, send, headers, agent, key, _request_ids.new())
    structlog.contextvars.bind_contextvars(request_id=call.request_id, agent=f"{workspace}/{slug}")
    try:
        version_header = (headers.get("mcp-protocol-version") or "").strip()
        modern_era = bool(version_header) and version_header not in LEGACY_VERSIONS
        method = scope["method"]
        if method not in ("POST", "GET", "DELETE"):
            await call.answer(405, headers={"Allow": "GET, POST, DELETE"})
        elif modern_era:
            await modern.handle(call, method, version_header)
        else:
            await legacy.handle(call, method, version_header or None)
    finally:
        latency_histogram(call.label).observe(time.perf_counter() - started)
        structlog.contextvars.unbind_contextvars("request_id", "agent")


def bearer(headers: Headers) -> str | None:
    value = headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None
