"""One authenticated request to the MCP endpoint, and what both eras check on it."""

from __future__ import annotations

from dataclasses import dataclass

from mcp_gateway.asgi import (
    Headers,
    Receive,
    Scope,
    Send,
    end_stream,
    respond,
    send_event,
    start_stream,
)
from mcp_gateway.jsonrpc import RATE_LIMITED_CODE, RequestId, encode, error
from mcp_gateway.metrics import RATE_LIMITED, requests_counter
from mcp_gateway.rate_limits import MethodClass
from mcp_gateway.snapshot import Agent, Key
from mcp_gateway.state import GatewayState

LEGACY_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
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
class Call:
    """One HTTP request to the endpoint, authenticated and resolved."""

    state: GatewayState
    scope: Scope
    receive: Receive
    send: Send
    headers: Headers
    agent: Agent
    key: Key
    request_id: str
    rpc_method: str = "-"  # for metrics and logs, once known

    @property
    def label(self) -> str:
        return self.rpc_method if self.rpc_method in _LABELLED else "other"

    async def answer(
        self, status: int, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> None:
        requests_counter(self.label, status).inc()
        await respond(self.send, status, body, headers=headers)

    async def admit(
        self, kind: MethodClass, request_id: RequestId | None = None, cost: int = 1
    ) -> bool:
        """Take ``cost`` from the key's rate limit; over it, answer 429 and return False."""
        limit = self.agent.rate_limit or self.state.default_rate_limit
        wait_s = self.state.limiter.take(self.key.id, limit, kind, cost)
        if not wait_s:
            return True
        RATE_LIMITED.labels(f"{self.agent.workspace}/{self.agent.slug}", kind).inc()
        body = encode(
            error(request_id, RATE_LIMITED_CODE, "rate limit exceeded", {"retry_after_s": wait_s})
        )
        await self.answer(429, body, {"Retry-After": str(wait_s)})
        return False

    async def reply(self, body: bytes, headers: dict[str, str] | None = None) -> None:
        """A 200 answer: JSON when the client accepts it, else one SSE event."""
        accepted = accepts(self.headers)
        if accepted is None or accepted[0]:
            await self.answer(200, body, headers)
            return
        requests_counter(self.label, 200).inc()
        await start_stream(self.send, headers)
        await send_event(self.send, body)
        await end_stream(self.send)


def accepts(headers: Headers) -> tuple[bool, bool] | None:
    """(JSON, SSE) the client accepts for a POST answer; None when it accepts neither.
    A missing Accept or */* gets JSON (DESIGN "Seed curl sequence")."""
    accept = headers.get("accept")
    if not accept:
        return True, False
    types = {part.split(";")[0].strip().lower() for part in accept.split(",")}
    json_ok = bool(types & {"application/json", "application/*", "*/*"})
    sse_ok = "text/event-stream" in types
    return (json_ok, sse_ok) if json_ok or sse_ok else None


def json_content(headers: Headers) -> bool:
    content_type = (headers.get("content-type") or "").split(";")[0].strip().lower()
    return content_type == "application/json"
