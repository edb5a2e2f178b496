"""A loopback webhook receiver that checks every delivery as a subscriber would:
the Standard Webhooks signature, verified with the PyPI ``standardwebhooks``
package (an implementation that is not Crank's)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
from aiohttp import web
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from tests.support.api import auth
from tests.support.gateway import serve_upstream
from tests.support.processes import free_port
from tests.support.tool_calls import BASE, ok


@dataclass
class Received:
    webhook_id: str
    headers: dict[str, str]
    body: bytes
    at: float  # time.monotonic() on arrival
    verified: Any  # the parsed body when the signature held, else None


@dataclass
class Receiver:
    """Records every request; answers ``fail_first`` of them with 500; while ``hold``
    is set, the next request waits for ``gate`` (and ``entered`` says one arrived)."""

    port: int = field(default_factory=free_port)
    secret: str | None = None  # the subscription's signing secret, once known
    received: list[Received] = field(default_factory=list)
    fail_first: int = 0
    hold: bool = False
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    entered: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks"

    async def hook(self, request: web.Request) -> web.Response:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}  # names: any case
        verified = None
        if self.secret is not None:
            try:
                verified = Webhook(self.secret).verify(body, headers)
            except WebhookVerificationError:
                verified = None
        self.received.append(
            Received(headers.get("webhook-id", ""), headers, body, time.monotonic(), verified)
        )
        if self.hold:
            self.hold = False
            self.entered.set()
            await self.gate.wait()
        if self.fail_first > 0:
            self.fail_first -= 1
            return web.Response(status=500, text="try again")
        return web.Response(status=204)

    def events(self) -> list[str]:
        return [r.verified["type"] for r in self.received if r.verified is not None]


@asynccontextmanager
async def serve_receiver() -> AsyncIterator[Receiver]:
    state = Receiver()
    app = web.Application()
    app.router.add_post("/hooks", state.hook)
    async with serve_upstream(app, state.port, handler_cancellation=True):
        try:
            yield state
        finally:
            state.gate.set()


async def subscribe(
    client: httpx.AsyncClient,
    admin: str,
    url: str,
    *,
    agent: str = "sales",
    events: list[str] | None = None,
    format: str = "standard",
) -> dict[str, Any]:
    """A new subscription through the admin API; its answer (with the secret)."""
    body: dict[str, Any] = {"url": url, "format": format}
    if events is not None:
        body["events"] = events
    created = await ok(
        await client.post(f"{BASE}/agents/{agent}/webhooks", json=body, headers=auth(admin))
    )
    answer: dict[str, Any] = created.json()
    return answer
