"""Hostile input at a real gateway process: deep JSON, an unreadable Origin, huge batches,
batches past the rate limit. Each case checks the status, that the error body is a
JSON-RPC error (or the approval endpoints' documented ``{code, message}``) with no
traceback, and that the gateway still answers (docs/security.md, "MCP and approval
endpoints")."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api import Client
from tests.support.gateway import (
    FRANKFURTER,
    SEED_URL_PATH,
    Catalog,
    limit_agent,
    run_gateway,
    seed_catalog,
)
from tests.support.mcp import INIT, TOOLS_LIST, bearer, modern, open_session
from tests.support.processes import largest_descendant
from tests.support.tool_calls import publish_agent, publish_operation
from tests.support.worker_health import PeakMemory

APPROVALS_PATH = "/mcp/v1/default/currency-rates/approvals"
CALL: dict[str, Any] = {  # invalid arguments: refused before any upstream is reached
    "jsonrpc": "2.0",
    "method": "tools/call",
    "params": {"name": "frankfurter_latest_rate", "arguments": {"base": "not a code"}},
}


@pytest.fixture
async def setup(client: Client, admin_token: str, database_url: str, tmp_path: Path) -> Any:
    catalog = await seed_catalog(client, admin_token)
    async with (
        run_gateway(database_url, tmp_path) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=30) as http,
    ):
        yield catalog, gateway, http


def json_rpc_error(response: httpx.Response, status: int, code: int) -> dict[str, Any]:
    """The JSON-RPC error of ``response``, checked to be of ``status`` and ``code``."""
    assert response.status_code == status, response.text[:500]
    assert "Traceback" not in response.text
    body = response.json()
    assert body["jsonrpc"] == "2.0"
    assert body["error"]["code"] == code, body
    error: dict[str, Any] = body["error"]
    return error


async def still_serves(http: httpx.AsyncClient, catalog: Catalog) -> None:
    assert (await http.get("/healthz")).status_code == 200
    await open_session(http, catalog.agent_key)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


async def test_deep_json_is_a_parse_error_in_both_eras(setup: Any) -> None:
    catalog, _, http = setup
    session = {
        **bearer(catalog.agent_key),
        "MCP-Session-Id": await open_session(http, catalog.agent_key),
    }
    for depth in (990, 5000, 400_000):
        for headers in (session, modern(catalog.agent_key, "tools/list")):
            response = await http.post(SEED_URL_PATH, content=nested(depth), headers=headers)
            error = json_rpc_error(response, 400, -32700)
            assert "nested deeper than 64" in error["message"]
    # Inside the bound a message nests as deep as it likes.
    deep_params = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "ping",
        "params": {"x": json.loads(nested(60))},
    }
    assert (await http.post(SEED_URL_PATH, json=deep_params, headers=session)).status_code == 200
    # Brackets inside strings do not nest.
    ping = {"jsonrpc": "2.0", "id": 9, "method": "ping", "params": {"x": "[" * 5000}}
    assert (await http.post(SEED_URL_PATH, json=ping, headers=session)).status_code == 200
    await still_serves(http, catalog)


@pytest.mark.parametrize("origin", ["http://[::1", "http://[", "https://[zz::1]:80"])
async def test_an_unreadable_origin_is_403_before_the_key_on_both_endpoints(
    setup: Any, origin: str
) -> None:
    catalog, _, http = setup
    for key in (None, "crk_agent_wrong", catalog.agent_key):
        headers = {"Origin": origin, "Content-Type": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        mcp = await http.post(SEED_URL_PATH, json=TOOLS_LIST, headers=headers)
        assert json_rpc_error(mcp, 403, -32001)["message"] == "Origin not allowed"
        approvals = await http.get(APPROVALS_PATH, headers=headers)
        assert approvals.status_code == 403
        assert approvals.json() == {"code": "forbidden", "message": "Origin not allowed"}
        preflight = await http.options(APPROVALS_PATH, headers=headers)
        assert preflight.status_code == 403
    await still_serves(http, catalog)


async def test_a_batch_over_the_item_limit_is_refused_without_growing_the_process(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    catalog = await seed_catalog(client, admin_token)
    # An agent whose tools/list answer is about 5 KB, like the fuzzer's.
    names = [f"wide_{n}" for n in range(4)]
    for name in names:
        spec = {**FRANKFURTER, "name": name, "description": FRANKFURTER["description"] * 4}
        await publish_operation(client, admin_token, spec)
    key = await publish_agent(client, admin_token, "wide", names)
    path = "/mcp/v1/default/wide"
    # No rate limit: the bound on items alone must hold the batch back.
    async with (
        run_gateway(database_url, tmp_path, extra_env={"CRANK_RATE_LIMIT": "off"}) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=30) as http,
    ):
        init = {**INIT, "params": {"protocolVersion": "2025-03-26", "capabilities": {}}}
        opened = await http.post(path, json=init, headers=bearer(key))
        headers = {**bearer(key), "MCP-Session-Id": opened.headers["mcp-session-id"]}
        one = await http.post(path, json=[TOOLS_LIST], headers=headers)
        assert len(one.content) > 4000
        # Like the fuzzer's batch of 21,000 tools/list in under 1 MB; before the bound it
        # made an answer of 20,000 tools/list pages (here 90 MB) in memory at once.
        items = [{"jsonrpc": "2.0", "id": i, "method": "tools/list"} for i in range(20_000)]
        body = json.dumps(items, separators=(",", ":")).encode()
        assert len(body) < 1_048_576
        memory = PeakMemory(largest_descendant(gateway.process.pid))
        memory.reset()
        response = await http.post(path, content=body, headers=headers)
        grown_mib = memory.growth_mib
        assert grown_mib < 60, f"the worker's peak grew by {grown_mib:.0f} MiB"
        assert len(response.content) < 1000
        error = json_rpc_error(response, 400, -32600)
        assert error["data"] == {"max_batch_items": 100, "batch_items": 20_000}
        assert "at most 100 messages" in error["message"]
        at_limit = await http.post(path, json=items[:100], headers=headers)
        assert at_limit.status_code == 200
        assert [answer["id"] for answer in at_limit.json()] == list(range(100))
        await still_serves(http, catalog)


async def test_a_batch_answer_stops_at_its_byte_limit(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    catalog = await seed_catalog(client, admin_token)
    budget = 65_536
    env = {"CRANK_MCP_MAX_BATCH_ANSWER_BYTES": str(budget), "CRANK_MCP_MAX_BATCH_ITEMS": "1000"}
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=30) as http,
    ):
        session_id = await open_session(http, catalog.agent_key, "2025-03-26")
        headers = {**bearer(catalog.agent_key), "MCP-Session-Id": session_id}
        one = await http.post(SEED_URL_PATH, json=[TOOLS_LIST], headers=headers)
        answer_bytes = len(one.content)
        items = [{"jsonrpc": "2.0", "id": i, "method": "tools/list"} for i in range(1000)]
        response = await http.post(SEED_URL_PATH, json=items, headers=headers)
        assert response.status_code == 200
        answers = response.json()
        assert [answer["id"] for answer in answers] == list(range(1000))  # each gets one
        ran = [answer for answer in answers if "result" in answer]
        refused = [answer for answer in answers if "error" in answer]
        assert len(ran) == -(-budget // answer_bytes)  # run until the answers reach the budget
        assert all(answer["error"]["code"] == -32600 for answer in refused)
        assert refused[0]["error"]["data"] == {"max_batch_answer_bytes": budget}
        assert "not run" in refused[0]["error"]["message"]
        assert len(response.content) < budget + answer_bytes + 250 * len(refused)
        await still_serves(http, catalog)


async def test_a_batch_larger_than_the_rate_limit_is_refused_and_retry_after_is_true(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    catalog = await seed_catalog(client, admin_token)
    await limit_agent(client, admin_token, requests=2, per_seconds=2)  # a burst of 2, 1/s
    async with (
        run_gateway(database_url, tmp_path) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=30) as http,
    ):
        session_id = await open_session(http, catalog.agent_key, "2025-03-26")
        headers = {**bearer(catalog.agent_key), "MCP-Session-Id": session_id}
        calls = [{**CALL, "id": i} for i in range(3)]
        # Larger than the bucket: no wait would ever let it pass (it used to get
        # Retry-After: 1 forever).
        too_big = await http.post(SEED_URL_PATH, json=calls, headers=headers)
        error = json_rpc_error(too_big, 400, -32600)
        assert error["data"] == {"method_class": "tools_call", "needed": 3, "limit": 2}
        assert "retry-after" not in too_big.headers
        assert "send smaller batches" in error["message"]
        # Within the bucket: admitted, then refused with the real wait (2 tokens at 1/s).
        assert (await http.post(SEED_URL_PATH, json=calls[:2], headers=headers)).status_code == 200
        waiting = await http.post(SEED_URL_PATH, json=calls[:2], headers=headers)
        retry_after = int(waiting.headers["retry-after"])
        assert json_rpc_error(waiting, 429, -32029)["data"] == {"retry_after_s": retry_after}
        assert retry_after == 2
        await asyncio.sleep(retry_after)
        assert (await http.post(SEED_URL_PATH, json=calls[:2], headers=headers)).status_code == 200
