"""The MCP endpoint: authentication, the HTTP method, then the legacy or the modern era.

Order of checks (docs/architecture.md, "Status precedence"): Origin, key,
published agent and key kind (mcp_gateway.transport.auth) → HTTP method (405) →
protocol era. A request whose ``MCP-Protocol-Version`` is not a legacy
revision goes to the modern (2026-07-28, stateless) handler; everything else,
including no header at all, is the legacy session protocol. Every refusal on
the way is a ProtocolError, answered here as a JSON-RPC error.
"""

from __future__ import annotations

import contextlib
import time

import structlog

from mcp_gateway.request_ids import new_request_id
from mcp_gateway.transport import legacy, modern
from mcp_gateway.transport.asgi import CLOSE, Headers, Receive, Scope, Send, respond
from mcp_gateway.transport.auth import authenticate_requester
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.exchange import Exchange
from mcp_gateway.transport.state import GatewayState
from mcp_gateway.upkeep.metrics import latency_histogram, requests_counter
from mcp_gateway.vocabulary.jsonrpc import INTERNAL_ERROR
from mcp_gateway.vocabulary.versions import LEGACY_VERSIONS
from shared import tracing
from shared.principals import LOG_KEYS, log_fields

_ALLOW = {"Allow": "GET, POST, DELETE"}
log = structlog.get_logger(__name__)


async def handle(
    state: GatewayState, scope: Scope, receive: Receive, send: Send, workspace: str, slug: str
) -> None:
    """Answer one request to the MCP endpoint of ``workspace``/``slug``."""
    started = time.perf_counter()
    headers = Headers(scope)
    exchange: Exchange | None = None
    trace = tracing.RequestTrace(headers.get) if tracing.enabled else None  # (docs/tracing.md)
    if trace is not None:
        send = trace.watch(send)
    try:
        agent, requester = await authenticate_requester(state, scope, headers, workspace, slug)
        exchange = Exchange(
            state, scope, receive, send, headers, agent, requester, new_request_id(), trace=trace
        )
        # Who called, on every line of the request and on its span: the key's id, or
        # the person's issuer and subject and the client; never the token
        # (docs/architecture.md, "Identity").
        person = requester.recorded
        structlog.contextvars.bind_contextvars(
            request_id=exchange.request_id,
            agent=f"{workspace}/{slug}",
            **log_fields(requester.key_id, person),
        )
        if trace is not None:
            trace.requester(requester.key_id, person)
        version_header = (headers.get("mcp-protocol-version") or "").strip()
        method = scope["method"]
        # What arrived, never its body (docs/security.md, "What logs never hold").
        log.debug("mcp_request", http_method=method, protocol_version=version_header or None)
        if method not in ("POST", "GET", "DELETE"):
            raise ProtocolError(405, "method not allowed", code=None, headers=_ALLOW)
        if version_header and version_header not in LEGACY_VERSIONS:
            await modern.handle(exchange, method, version_header)
        else:
            await legacy.handle(exchange, method, version_header or None)
    except ProtocolError as problem:
        if trace is not None:
            trace.rpc_error(problem.code, problem.message)
        label = "-" if exchange is None else exchange.label
        requests_counter(label, problem.status).inc()
        answer_headers = problem.headers
        if exchange is None:  # refused before its body was read
            answer_headers = {**(answer_headers or {}), **CLOSE}
        await respond(send, problem.status, problem.jsonrpc_body(), headers=answer_headers)
    except Exception as exc:
        if trace is not None:
            trace.crashed(exc)
        # A bug, never an input (no input answers 500: docs/security.md,
        # "Hostile input"): logged with its request id, answered without a traceback.
        log.exception("mcp_endpoint_failed")
        label = "-" if exchange is None else exchange.label
        requests_counter(label, 500).inc()
        crashed = ProtocolError(500, "internal error; retry later", code=INTERNAL_ERROR)
        with contextlib.suppress(Exception):  # the answer may have started already
            await respond(send, 500, crashed.jsonrpc_body())
    finally:
        if exchange is not None:
            latency_histogram(exchange.label).observe(time.perf_counter() - started)
            structlog.contextvars.unbind_contextvars("request_id", "agent", *LOG_KEYS)
        if trace is not None:
            if exchange is None:  # refused before the key was accepted
                trace.finish(scope["method"], None, None, None)
            else:
                trace.finish(scope["method"], workspace, slug, exchange.request_id)
