"""The local run's default, through a real gateway and the official MCP SDK: with
``CRANK_ALLOW_LOOPBACK_UPSTREAMS`` (``crank up`` on loopback sets it) a workspace's
tool reaches an API on this machine without an allowlist entry or a grant; without
it (production) the same call is refused, and the model's tool error stays generic:
it names no setting, page or address (try-it tells the admin what to change)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
from aiohttp import web
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from tests.support.api import Client, auth
from tests.support.gateway import Gateway, run_gateway, serve_upstream
from tests.support.tool_calls import ok, publish_agent, publish_operation

GENERIC_ACTION = "Tell the user that the administrator must allow this upstream."


def read_data(port: int) -> dict[str, Any]:
    return {
        "name": "read_data",
        "description": "Reads the local data. Use when the user asks for the data.",
        "input": {"type": "object", "properties": {}},
        "request": {"method": "GET", "url": f"http://127.0.0.1:{port}/data"},
        "response": {"select": "@"},
        "execution_config": {"timeout_ms": 2000, "retries": 0},
    }


async def call(gateway: Gateway, key: str) -> dict[str, Any]:
    """One tools/call of read_data as the official SDK makes it: the structured content."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
        url = f"{gateway.url}/mcp/v1/dev/reader"
        async with McpClient(streamable_http_client(url, http_client=http)) as mcp:
            called = await mcp.call_tool("read_data", {})
    assert called.structured_content is not None
    return {"is_error": called.is_error, **called.structured_content}


async def test_loopback_upstreams_open_with_the_local_switch_only(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    hits: list[str] = []

    async def data(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"rows": [1, 2, 3]})

    app = web.Application()
    app.router.add_get("/data", data)
    async with serve_upstream(app) as port:
        await ok(
            await client.post("/api/v1/workspaces", json={"slug": "dev"}, headers=auth(admin_token))
        )
        base = "/api/v1/workspaces/dev"
        await publish_operation(client, admin_token, read_data(port), base=base)
        key = await publish_agent(client, admin_token, "reader", ["read_data"], base=base)

        closed = {"CRANK_RATE_LIMIT": "off"}
        async with run_gateway(database_url, tmp_path, extra_env=closed) as gateway:
            refused = await call(gateway, key)
        assert (refused["is_error"], refused["error_code"]) == (True, "upstream_blocked")
        assert refused["suggested_action"] == GENERIC_ACTION
        for word in ("CRANK_", "Egress", "127.0.0.1", "grant"):
            assert word not in refused["message"] + refused["suggested_action"]
        assert hits == []

        local = {**closed, "CRANK_ALLOW_LOOPBACK_UPSTREAMS": "true"}
        async with run_gateway(database_url, tmp_path, extra_env=local) as gateway:
            assert await call(gateway, key) == {"is_error": False, "rows": [1, 2, 3]}
        assert hits == ["/data"]
