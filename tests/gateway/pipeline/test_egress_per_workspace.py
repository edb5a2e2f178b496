"""tools/call under the workspace's egress policy, through a real gateway.

The operator allowlists one loopback upstream (``CRANK_UPSTREAM_ALLOWLIST``),
as it would an internal host; an instance admin grants it to workspace
tenant-a only. Both workspaces publish the same tool; tenant-b's tool must not
reach the upstream, not even over the connection tenant-a's calls leave in
the gateway's pool. Policy changes reach the gateway through the catalog version.
The client is the official MCP SDK.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import httpx2
from aiohttp import web
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from tests.support.api import Client, auth, grant_egress
from tests.support.gateway import Gateway, run_gateway, serve_upstream, wait_until
from tests.support.tool_calls import ok, publish_agent, publish_operation

TENANTS = ("tenant-a", "tenant-b")


def read_data(port: int) -> dict[str, Any]:
    return {
        "name": "read_data",
        "description": "Reads the internal data. Use when the user asks for the data.",
        "input": {"type": "object", "properties": {}},
        "request": {"method": "GET", "url": f"http://127.0.0.1:{port}/data"},
        "response": {"select": "@"},
        "execution_config": {"timeout_ms": 2000, "retries": 0},
    }


async def call(gateway: Gateway, workspace: str, key: str) -> dict[str, Any]:
    """One tools/call of read_data as the official SDK makes it: the structured content."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
        url = f"{gateway.url}/mcp/v1/{workspace}/reader"
        async with McpClient(streamable_http_client(url, http_client=http)) as mcp:
            called = await mcp.call_tool("read_data", {})
    content = called.structured_content
    assert content is not None
    return {"is_error": called.is_error, **content}


async def set_hosts(client: httpx.AsyncClient, admin: str, workspace: str, hosts: Any) -> None:
    base = f"/api/v1/workspaces/{workspace}/egress"
    etag = (await ok(await client.get(base, headers=auth(admin)))).headers["etag"]
    await ok(await client.put(f"{base}/hosts", json={"hosts": hosts}, headers=auth(admin, etag)))


async def test_a_tool_of_workspace_b_cannot_reach_a_loopback_host_granted_only_to_a(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    hits: list[str] = []

    async def data(request: web.Request) -> web.Response:
        hits.append(request.path)
        return web.json_response({"rows": [1, 2, 3]})

    app = web.Application()
    app.router.add_get("/data", data)
    async with serve_upstream(app) as port:
        keys: dict[str, str] = {}
        for workspace in TENANTS:
            h = auth(admin_token)
            await ok(await client.post("/api/v1/workspaces", json={"slug": workspace}, headers=h))
            base = f"/api/v1/workspaces/{workspace}"
            await publish_operation(client, admin_token, read_data(port), base=base)
            keys[workspace] = await publish_agent(
                client, admin_token, "reader", ["read_data"], base=base
            )
        await grant_egress(client, admin_token, "tenant-a", f"127.0.0.1:{port}")

        env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{port}", "CRANK_RATE_LIMIT": "off"}
        async with run_gateway(database_url, tmp_path, extra_env=env) as gateway:
            assert await call(gateway, "tenant-a", keys["tenant-a"]) == {
                "is_error": False,
                "rows": [1, 2, 3],
            }
            refused = await call(gateway, "tenant-b", keys["tenant-b"])
            assert (refused["is_error"], refused["error_code"]) == (True, "upstream_blocked")
            assert refused["recoverable"] is False
            assert "127.0.0.1" not in refused["message"]  # the model learns no address

            async def logged() -> bool:  # the operator learns which host, and why
                return "the workspace's egress policy does not allow 127.0.0.1" in gateway.log()

            await wait_until(logged)
            assert (await call(gateway, "tenant-a", keys["tenant-a"]))["is_error"] is False
            assert hits == ["/data", "/data"]  # tenant-a's two calls only

            # A grant reaches the running gateway through the catalog version ...
            await grant_egress(client, admin_token, "tenant-b", f"127.0.0.1:{port}")

            async def b_reaches_it() -> bool:
                return not (await call(gateway, "tenant-b", keys["tenant-b"]))["is_error"]

            await wait_until(b_reaches_it, timeout_s=15)
            # ... and so does an owner's narrowing of the host list.
            await set_hosts(client, admin_token, "tenant-a", ["api.example.com"])

            async def a_is_refused() -> bool:
                result = await call(gateway, "tenant-a", keys["tenant-a"])
                return result.get("error_code") == "upstream_blocked"

            await wait_until(a_is_refused, timeout_s=15)
