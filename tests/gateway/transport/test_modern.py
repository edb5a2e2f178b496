"""The modern era (2026-07-28, stateless) over real HTTP, and the official SDK
client in its default mode (which probes this era first) and in legacy mode."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from tests.support.api import Client, auth
from tests.support.gateway import SEED_URL_PATH, run_gateway, seed_catalog
from tests.support.mcp import META, VERSION, modern, request


@pytest.fixture
async def setup(client: Client, admin_token: str, database_url: str, tmp_path: Path) -> Any:
    catalog = await seed_catalog(client, admin_token)
    async with (
        run_gateway(database_url, tmp_path) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as http,
    ):
        yield catalog, gateway, http


async def test_discover_and_tools_list_carry_result_type_and_caching(setup: Any) -> None:
    catalog, _, http = setup
    discover = await http.post(
        SEED_URL_PATH,
        json=request("server/discover"),
        headers=modern(catalog.agent_key, "server/discover"),
    )
    assert discover.status_code == 200, discover.text
    result = discover.json()["result"]
    assert VERSION in result["supportedVersions"]
    assert result["resultType"] == "complete"
    assert result["capabilities"]["tools"] == {"listChanged": True}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "crank"
    assert "mcp-session-id" not in discover.headers

    listed = await http.post(
        SEED_URL_PATH, json=request("tools/list"), headers=modern(catalog.agent_key, "tools/list")
    )
    tools = listed.json()["result"]
    assert [t["name"] for t in tools["tools"]] == ["frankfurter_latest_rate"]
    assert (tools["resultType"], tools["ttlMs"], tools["cacheScope"]) == (
        "complete",
        5000,
        "private",
    )

    for method, field in [
        ("prompts/list", "prompts"),
        ("resources/list", "resources"),
        ("resources/templates/list", "resourceTemplates"),
    ]:
        empty = await http.post(
            SEED_URL_PATH, json=request(method), headers=modern(catalog.agent_key, method)
        )
        assert empty.json()["result"][field] == []


@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("no _meta", 400, -32602),
        ("_meta without capabilities", 400, -32602),
        ("Mcp-Method differs", 400, -32020),
        ("Mcp-Method missing", 400, -32020),
        ("Mcp-Method in capitals", 400, -32020),
        ("_meta version differs from header", 400, -32020),
        ("unsupported version", 400, -32022),
        ("initialize is removed", 404, -32601),
        ("ping is removed", 404, -32601),
        ("unknown method", 404, -32601),
        ("Mcp-Name differs", 400, -32020),
        ("Mcp-Name missing", 400, -32020),
    ],
)
async def test_modern_request_checks(setup: Any, case: str, status: int, code: int) -> None:
    catalog, _, http = setup
    method, params, meta = "tools/list", None, dict(META)
    headers = modern(catalog.agent_key, method)
    if case == "no _meta":
        meta = None  # type: ignore[assignment]
    elif case == "_meta without capabilities":
        meta.pop("io.modelcontextprotocol/clientCapabilities")
    elif case == "Mcp-Method differs":
        headers["Mcp-Method"] = "prompts/list"
    elif case == "Mcp-Method missing":
        headers.pop("Mcp-Method")
    elif case == "Mcp-Method in capitals":
        headers["Mcp-Method"] = "TOOLS/LIST"
    elif case == "_meta version differs from header":
        meta["io.modelcontextprotocol/protocolVersion"] = "v999.0.0"
    elif case == "unsupported version":
        meta["io.modelcontextprotocol/protocolVersion"] = "v999.0.0"
        headers["MCP-Protocol-Version"] = "v999.0.0"
    elif case in ("initialize is removed", "ping is removed", "unknown method"):
        method = {"initialize is removed": "initialize", "ping is removed": "ping"}.get(
            case, "unknown/method"
        )
        headers["Mcp-Method"] = method
    elif case in ("Mcp-Name differs", "Mcp-Name missing"):
        method, params = "tools/call", {"name": "frankfurter_latest_rate", "arguments": {}}
        headers["Mcp-Method"] = method
        if case == "Mcp-Name differs":
            headers["Mcp-Name"] = "wrong_tool_name"
    response = await http.post(SEED_URL_PATH, json=request(method, params, meta), headers=headers)
    assert (response.status_code, response.json()["error"]["code"]) == (status, code), response.text
    assert response.json()["id"] == 7
    if code == -32022:
        data = response.json()["error"]["data"]
        assert data["requested"] == "v999.0.0"
        assert VERSION in data["supported"]


async def test_routing_header_names_are_case_insensitive(setup: Any) -> None:
    catalog, _, http = setup
    headers = modern(catalog.agent_key, "tools/list")
    headers.pop("Mcp-Method")
    headers["MCP-METHOD"] = "tools/list"
    response = await http.post(SEED_URL_PATH, json=request("tools/list"), headers=headers)
    assert response.status_code == 200


async def test_unknown_tool_is_minus_32602_in_http_200(setup: Any) -> None:
    catalog, _, http = setup
    headers = modern(catalog.agent_key, "tools/call", **{"Mcp-Name": "nope"})
    response = await http.post(
        SEED_URL_PATH,
        json=request("tools/call", {"name": "nope", "arguments": {}}),
        headers=headers,
    )
    assert (response.status_code, response.json()["error"]["code"]) == (200, -32602)


async def test_get_and_delete_are_405_in_the_modern_era(setup: Any) -> None:
    catalog, _, http = setup
    headers = modern(catalog.agent_key, "tools/list")
    assert (await http.get(SEED_URL_PATH, headers=headers)).status_code == 405
    assert (await http.delete(SEED_URL_PATH, headers=headers)).status_code == 405


async def test_subscriptions_listen_acknowledges_then_reports_list_changes(
    setup: Any, client: Client, admin_token: str
) -> None:
    catalog, _, http = setup
    body = request(
        "subscriptions/listen",
        {"notifications": {"toolsListChanged": True, "promptsListChanged": True}},
    )
    async with http.stream(
        "POST", SEED_URL_PATH, json=body, headers=modern(catalog.agent_key, "subscriptions/listen")
    ) as stream:
        assert stream.headers["content-type"] == "text/event-stream"
        events = stream.aiter_lines()
        first = await anext(line async for line in events if line.startswith("data: "))
        ack = json.loads(first[6:])
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["notifications"] == {"toolsListChanged": True}
        assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 7

        base = "/api/v1/workspaces/default"
        agent = await client.get(f"{base}/agents/currency-rates", headers=auth(admin_token))
        updated = await client.put(
            f"{base}/agents/currency-rates",
            json={**agent.json()["draft"], "operations": []},
            headers=auth(admin_token, agent.headers["etag"]),
        )
        await client.post(
            f"{base}/agents/currency-rates/publish",
            headers=auth(admin_token, updated.headers["etag"]),
        )
        line = await anext(line async for line in events if line.startswith("data: "))
        changed = json.loads(line[6:])
        assert changed["method"] == "notifications/tools/list_changed"
        assert changed["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == 7


@pytest.mark.parametrize(("mode", "version"), [("auto", VERSION), ("legacy", "2025-11-25")])
async def test_official_python_sdk_connects_and_lists(setup: Any, mode: str, version: str) -> None:
    catalog, gateway, _ = setup
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {catalog.agent_key}"}) as http:
        transport = streamable_http_client(gateway.url + SEED_URL_PATH, http_client=http)
        async with McpClient(transport, mode=mode) as mcp:
            tools = await mcp.list_tools()
            assert [tool.name for tool in tools.tools] == ["frankfurter_latest_rate"]
            assert mcp.protocol_version == version
