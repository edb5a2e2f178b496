"""A rates upstream on loopback and the ``rates`` agent that calls it, for the
tests that run tools/call through a real gateway process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
from aiohttp import web

from tests.support.api import Client, auth, grant_egress
from tests.support.gateway import FRANKFURTER, serve_upstream
from tests.support.mcp import bearer
from tests.support.processes import free_port
from tests.support.tool_calls import publish_agent, publish_operation

PATH = "/mcp/v1/default/rates"


class Upstream:
    """The rates upstream: records every request (and its ``traceparent``), answers 503
    while ``unavailable``."""

    def __init__(self) -> None:
        self.seen: list[str] = []
        self.traceparents: list[str | None] = []
        self.port = free_port()
        self.unavailable = False

    async def latest(self, request: web.Request) -> web.Response:
        self.seen.append(request.path_qs)
        self.traceparents.append(request.headers.get("traceparent"))
        if self.unavailable:
            return web.json_response({"message": "maintenance"}, status=503)
        return web.json_response(
            {
                "amount": 1.0,
                "base": request.query["base"],
                "date": "2026-11-30",
                "rates": {request.query["symbols"]: 0.94},
                "noise": "x" * 100,
            }
        )


@asynccontextmanager
async def serve_rates() -> AsyncIterator[Upstream]:
    """The rates upstream on a free loopback port, for the block."""
    state = Upstream()
    app = web.Application()
    app.router.add_get("/v1/latest", state.latest)
    async with serve_upstream(app, state.port):
        yield state


async def seed(client: Client, admin: str, upstream_port: int, blocked_port: int) -> str:
    """Workspace default: latest_rate (at ``upstream_port``), blocked_rate (at
    ``blocked_port``), both published to agent ``rates``; a new key of that agent."""
    h = auth(admin)
    assert (await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=h)).is_success
    rates = {
        **FRANKFURTER,
        "name": "latest_rate",
        "request": {**FRANKFURTER["request"], "url": f"http://127.0.0.1:{upstream_port}/v1/latest"},
        "execution_config": {"timeout_ms": 2000, "retries": 0},
    }
    blocked = {
        **rates,
        "name": "blocked_rate",
        "request": {**rates["request"], "url": f"http://127.0.0.1:{blocked_port}/v1/latest"},
    }
    await grant_egress(client, admin, "default", f"127.0.0.1:{upstream_port}")
    for spec in (rates, blocked):
        await publish_operation(client, admin, spec)
    return await publish_agent(client, admin, "rates", ["latest_rate", "blocked_rate"])


def call_body(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """A tools/call request body."""
    return {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


async def open_session_at(http: httpx.AsyncClient, key: str, path: str = PATH) -> str:
    """A legacy session at ``path``; its id."""
    response = await http.post(
        path,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
        headers=bearer(key),
    )
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]
