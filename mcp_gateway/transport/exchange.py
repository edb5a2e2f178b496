"""One authenticated HTTP exchange with the MCP endpoint: who asks, and how to answer.

It is also the pipeline's channel to the client during a call
(mcp_gateway.pipeline.channel): progress notifications and 2025 confirmation
forms go out on the call's SSE answer.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

from mcp_gateway.catalog.snapshot import Agent
from mcp_gateway.transport.asgi import (
    Headers,
    Receive,
    Scope,
    Send,
    end_stream,
    respond,
    send_event,
    start_stream,
    wait_disconnect,
)
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.rate_limits import MethodClass, OverCapacity
from mcp_gateway.transport.results import Rendering
from mcp_gateway.transport.state import GatewayState
from mcp_gateway.transport.streams import serve_stream
from mcp_gateway.upkeep.metrics import RATE_LIMITED, requests_counter
from mcp_gateway.vocabulary.jsonrpc import INVALID_REQUEST, RATE_LIMITED_CODE, RequestId, encode
from mcp_gateway.vocabulary.requesters import Requester
from shared.tracing import RequestTrace

# Metric labels: a client names any method it likes; only these get a series of their own.
_LABELLED = {
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "server/discover",
    "subscriptions/listen",
    "prompts/list",
    "resources/list",
    "resources/templates/list",
    "notifications/initialized",
    "response",
    "batch",
    "GET",
    "DELETE",
    "-",
}
_CLASS_WORDS = {"tools_call": "tools/call tokens", "other": "tokens for other requests"}


@dataclass(slots=True)
class Exchange:
    """One HTTP request to the MCP endpoint and its answer, after authentication
    (mcp_gateway.transport.auth): who asks, the agent, and the ASGI channel."""

    state: GatewayState
    scope: Scope
    receive: Receive
    send: Send
    headers: Headers
    agent: Agent
    requester: Requester
    request_id: str  # Crank's ``req_...`` id, for logs and the call log
    rpc_method: str = "-"  # for metrics and logs, once known
    json_answer: bool = (
        True  # the client takes JSON (else one SSE event); see transport.checks.read_request
    )
    sse_ok: bool = False  # the client takes an SSE answer (a tools/call may then wait)
    streaming: bool = False  # an SSE answer is open: notifications went out before the reply
    # A 2025 session that declared form elicitation: its hash (the form's answer is bound to it).
    elicitation_session: bytes | None = None
    trace: RequestTrace | None = None  # the request's span, while tracing is on (docs/tracing.md)

    @property
    def label(self) -> str:
        return self.rpc_method if self.rpc_method in _LABELLED else "other"

    async def answer(
        self, status: int, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> None:
        requests_counter(self.label, status).inc()
        await respond(self.send, status, body, headers=headers)

    def admit(self, kind: MethodClass, rpc_id: RequestId | None = None, cost: int = 1) -> None:
        """Take ``cost`` from the key's rate limit; over it, raise the 429 ProtocolError."""
        self.admit_all({kind: cost}, rpc_id)

    def admit_all(self, costs: dict[MethodClass, int], rpc_id: RequestId | None = None) -> None:
        """Take every cost of ``costs`` or none (a batch): 429 with the real wait when the
        tokens are not there yet, 400 when the request needs more than this replica ever
        holds (docs/architecture.md, "Rate limits across replicas")."""
        limit = self.agent.rate_limit or self.state.default_rate_limit
        try:
            wait_s = self.state.limiter.admit(self.requester.id, limit, costs)
        except OverCapacity as over:
            RATE_LIMITED.labels(f"{self.agent.workspace}/{self.agent.slug}", over.kind).inc()
            raise ProtocolError(
                400,
                f"this batch needs {over.cost} {_CLASS_WORDS[over.kind]} at once, more than "
                f"the key's rate limit ever allows here ({over.capacity}); send smaller batches",
                code=INVALID_REQUEST,
                data={"method_class": over.kind, "needed": over.cost, "limit": over.capacity},
                rpc_id=rpc_id,
            ) from None
        if not wait_s:
            return
        kind: MethodClass = "tools_call" if costs.get("tools_call") else "other"
        RATE_LIMITED.labels(f"{self.agent.workspace}/{self.agent.slug}", kind).inc()
        raise ProtocolError(
            429,
            "rate limit exceeded",
            code=RATE_LIMITED_CODE,
            data={"retry_after_s": wait_s},
            headers={"Retry-After": str(wait_s)},
            rpc_id=rpc_id,
        )

    async def notify(self, body: bytes) -> bool:
        """A notification ahead of the reply, on an SSE answer opened by the first one;
        False when the client has gone away."""
        try:
            if not self.streaming:
                requests_counter(self.label, 200).inc()
                await start_stream(self.send)
                self.streaming = True
            await send_event(self.send, body)
        except OSError:
            return False
        return True

    async def reply(self, body: bytes, headers: dict[str, str] | None = None) -> None:
        """A 200 answer: JSON when the client accepts it, else one SSE event; after
        ``notify``, the last event of the open SSE answer."""
        if self.streaming:
            with contextlib.suppress(OSError):  # the client may have left meanwhile
                await send_event(self.send, body)
                await end_stream(self.send)
            return
        if self.json_answer:
            await self.answer(200, body, headers)
            return
        requests_counter(self.label, 200).inc()
        await start_stream(self.send, headers)
        await send_event(self.send, body)
        await end_stream(self.send)

    async def stream(
        self,
        label: str,
        first: bytes | None,
        render: Callable[[str], bytes | None],
        ended: Callable[[], bool],
    ) -> None:
        """Hold this request's answer open as the agent's notification stream
        (mcp_gateway.transport.streams)."""
        requests_counter(label, 200).inc()
        state = self.state
        await serve_stream(
            state.streams,
            self.agent.id,
            self.receive,
            self.send,
            first=first,
            render=render,
            ended=ended,
        )

    def rendering(self, legacy: bool) -> Rendering:
        """How this exchange's call outcomes are rendered (mcp_gateway.transport.results)."""
        settings, agent = self.state.settings, self.agent
        return Rendering(
            legacy,
            settings.language,
            self.request_id,
            settings.public_path_prefix,
            agent.workspace,
            agent.slug,
        )

    # -- the pipeline's channel to the client (mcp_gateway.pipeline.channel) --

    async def progress(self, token: str | int, step: int, message: str) -> bool:
        params = {"progressToken": token, "progress": step, "message": message}
        return await self.notify(
            encode({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        )

    async def ask(self, request_id: str, message: str) -> bool:
        form = {
            "jsonrpc": "2.0",
            "id": request_id,
            "method": "elicitation/create",
            "params": {
                "message": message,
                "requestedSchema": {"type": "object", "properties": {}},
            },
        }
        return await self.notify(encode(form))

    async def gone(self) -> None:
        await wait_disconnect(self.receive)
