"""One authenticated HTTP exchange with the MCP endpoint: who asks, and how to answer."""

from __future__ import annotations

from dataclasses import dataclass

from mcp_gateway.catalog.snapshot import Agent, Key
from mcp_gateway.state import GatewayState
from mcp_gateway.transport.asgi import (
    Headers,
    Receive,
    Scope,
    Send,
    end_stream,
    respond,
    send_event,
    start_stream,
)
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.jsonrpc import RATE_LIMITED_CODE, RequestId
from mcp_gateway.transport.rate_limits import MethodClass
from mcp_gateway.upkeep.metrics import RATE_LIMITED, requests_counter

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


@dataclass(slots=True)
class Exchange:
    """One HTTP request to the MCP endpoint and its answer, after authentication
    (mcp_gateway.transport.auth): the key, its agent, and the ASGI channel."""

    state: GatewayState
    scope: Scope
    receive: Receive
    send: Send
    headers: Headers
    agent: Agent
    key: Key
    request_id: str  # Crank's ``req_...`` id, for logs and the call log
    rpc_method: str = "-"  # for metrics and logs, once known
    json_answer: bool = (
        True  # the client takes JSON (else one SSE event); see transport.checks.read_request
    )

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
        limit = self.agent.rate_limit or self.state.default_rate_limit
        wait_s = self.state.limiter.take(self.key.id, limit, kind, cost)
        if not wait_s:
            return
        RATE_LIMITED.labels(f"{self.agent.workspace}/{self.agent.slug}", kind).inc()
        raise ProtocolError(
            429,
            "rate limit exceeded",
            code=RATE_LIMITED_CODE,
            data={"retry_after_s": wait_s},
            headers={"Retry-After": str(wait_s)},
            rpc_id=rpc_id,
        )

    async def reply(self, body: bytes, headers: dict[str, str] | None = None) -> None:
        """A 200 answer: JSON when the client accepts it, else one SSE event."""
        if self.json_answer:
            await self.answer(200, body, headers)
            return
        requests_counter(self.label, 200).inc()
        await start_stream(self.send, headers)
        await send_event(self.send, body)
        await end_stream(self.send)
