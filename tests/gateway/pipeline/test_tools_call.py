"""tools/call end to end: a real gateway process calling a real upstream on
loopback (allowlisted by CRANK_UPSTREAM_ALLOWLIST, as `crank up` does for its
demo API), in both protocol eras and through the official SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from aiohttp import web
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from tests.conftest import Client, auth
from tests.gateway_support import FRANKFURTER, free_port, run_gateway, serve_upstream
from tests.test_gateway_legacy import bearer
from tests.tool_call_support import publish_agent, publish_operation

PATH = "/mcp/v1/default/rates"


class Upstream:
    def __init__(self) -> None:
        self.seen: list[str] = []
        self.port = free_port()
        self.unavailable = False

    async def latest(self, request: web.Request) -> web.Response:
        self.seen.append(request.path_qs)
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


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    async with serve_rates() as state:
        yield state


async def seed(client: Client, admin: str, upstream_port: int, blocked_port: int) -> str:
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
    for spec in (rates, blocked):
        await publish_operation(client, admin, spec)
    return await publish_agent(client, admin, "rates", ["latest_rate", "blocked_rate"])


def call_body(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 3,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


async def test_tools_call_reaches_the_upstream_and_returns_the_selected_result(
    client: Client, admin_token: str, database_url: str, tmp_path: Path, upstream: Upstream
) -> None:
    blocked_port = free_port()
    key = await seed(client, admin_token, upstream.port, blocked_port)
    env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream.port}"}
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=20) as http,
    ):
        session = {**bearer(key), "MCP-Session-Id": await open_session_at(http, key)}

        ok = (
            await http.post(
                PATH,
                json=call_body("latest_rate", {"base": "USD", "quote": "EUR"}),
                headers=session,
            )
        ).json()["result"]
        assert upstream.seen == ["/v1/latest?base=USD&symbols=EUR"]
        assert ok["isError"] is False
        assert ok["structuredContent"] == {
            "base": "USD",
            "date": "2026-11-30",
            "rates": {"EUR": 0.94},
        }
        assert '"rates"' in ok["content"][0]["text"]

        invalid = (
            await http.post(PATH, json=call_body("latest_rate", {"base": "usd"}), headers=session)
        ).json()["result"]
        assert invalid["isError"] is True
        assert invalid["structuredContent"]["error_code"] == "invalid_arguments"
        assert invalid["structuredContent"]["recoverable"] is False
        assert invalid["structuredContent"]["request_id"].startswith("req_")
        assert len(upstream.seen) == 1  # nothing was sent

        upstream.unavailable = True
        down = (
            await http.post(
                PATH,
                json=call_body("latest_rate", {"base": "USD", "quote": "EUR"}),
                headers=session,
            )
        ).json()["result"]
        assert (
            down["structuredContent"]["error_code"],
            down["structuredContent"]["recoverable"],
        ) == ("upstream_unavailable", True)
        assert "maintenance" not in down["content"][0]["text"]  # never a raw upstream dump

        blocked = (
            await http.post(
                PATH,
                json=call_body("blocked_rate", {"base": "USD", "quote": "EUR"}),
                headers=session,
            )
        ).json()["result"]
        assert blocked["structuredContent"]["error_code"] == "upstream_blocked"


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


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_official_sdk_calls_the_tool_in_both_eras(
    client: Client,
    admin_token: str,
    database_url: str,
    tmp_path: Path,
    upstream: Upstream,
    mode: str,
) -> None:
    key = await seed(client, admin_token, upstream.port, free_port())
    env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream.port}"}
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http,
    ):
        transport = streamable_http_client(gateway.url + PATH, http_client=http)
        async with McpClient(transport, mode=mode) as mcp:
            called = await mcp.call_tool("latest_rate", {"base": "USD", "quote": "EUR"})
            assert called.is_error is False
            assert called.structured_content == {
                "base": "USD",
                "date": "2026-11-30",
                "rates": {"EUR": 0.94},
            }
