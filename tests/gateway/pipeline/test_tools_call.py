"""tools/call end to end: a real gateway process calling a real upstream on
loopback (allowlisted by CRANK_UPSTREAM_ALLOWLIST, as `crank up` does for its
demo API), in both protocol eras and through the official SDK."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from tests.support.api import Client
from tests.support.gateway import run_gateway
from tests.support.mcp import bearer
from tests.support.processes import free_port
from tests.support.rates import PATH, Upstream, call_body, open_session_at, seed, serve_rates


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    async with serve_rates() as state:
        yield state


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
        # Recoverable: fixing the arguments and calling again can succeed.
        assert invalid["structuredContent"]["recoverable"] is True
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
