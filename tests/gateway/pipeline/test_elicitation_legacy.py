"""DELETE confirmation asked of the human over a 2025 session's SSE stream.

Two gateway processes (A and B, one database) as two replicas; the upstream is a
local aiohttp app on loopback that counts every request. The official Python SDK
(mcp 2.x, ``mode="legacy"``: the initialize handshake, 2025-11-25) is the client
with an ``elicitation_callback``; the 2025-06-18 session, the old session id and
the answer reaching the other replica are raw HTTP.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import mcp_types
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from tests.support.api import make_token
from tests.support.gateway import Gateway, run_gateway
from tests.support.humans import Human
from tests.support.orders import OrdersUpstream, fresh_orders, order_operations, publish_orders
from tests.support.tool_calls import publish_agent, rpc, token_of

PATH = "/mcp/v1/default/ops"


@dataclass
class World:
    a: Gateway
    b: Gateway
    upstream: OrdersUpstream
    key: str
    http: httpx.AsyncClient

    def hits(self, order: str) -> int:
        return sum(n for hit, n in self.upstream.hits.items() if f"/{order}" in hit)


@pytest.fixture(scope="module")
async def world(
    pg_server_url: str, run_database: str, app: Litestar, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    async with fresh_orders(pg_server_url, run_database) as (url, upstream, port):
        specs = order_operations(port)
        admin = await make_token(url, "admin")
        async with AsyncTestClient(app=app) as client:
            await publish_orders(client, admin, specs, port)
            key = await publish_agent(client, admin, "ops", [s["name"] for s in specs])
        env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{port}", "CRANK_RATE_LIMIT": "off"}
        tmp = tmp_path_factory.mktemp("elicitation_legacy")
        async with (
            run_gateway(url, tmp, extra_env=env) as a,
            run_gateway(url, tmp, extra_env=env | {"CRANK_ELICITATION_TTL_S": "2"}) as b,
            httpx.AsyncClient(timeout=30) as http,
        ):
            yield World(a, b, upstream, key, http)


async def _sdk_call(world: World, human: Human | None, order: str) -> mcp_types.CallToolResult:
    headers = {"Authorization": f"Bearer {world.key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(world.a.url + PATH, http_client=http)
        async with McpClient(transport, mode="legacy", elicitation_callback=human) as client:
            assert client.protocol_version == "2025-11-25"
            return await client.call_tool("delete_order", {"order_id": order})


def _error_code(called: mcp_types.CallToolResult) -> Any:
    assert called.structured_content is not None, called
    return called.structured_content["error_code"]


async def test_sdk_accept_runs_the_delete_once_without_a_token(world: World) -> None:
    human = Human("accept")
    called = await _sdk_call(world, human, "l-accept")
    assert called.is_error is False, called
    assert called.structured_content == {"order_id": "l-accept", "deleted": True}
    assert world.upstream.hits["DELETE /orders/l-accept"] == 1
    [form] = human.forms
    assert 'order_id = "l-accept"' in form.message
    assert "ct_" not in form.message
    assert "ct_" not in called.model_dump_json()


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_sdk_decline_or_cancel_is_confirmation_declined(world: World, action: str) -> None:
    human = Human(action)
    called = await _sdk_call(world, human, f"l-{action}")
    assert called.is_error is True
    assert _error_code(called) == "confirmation_declined"
    assert "ct_" not in called.model_dump_json()
    assert len(human.forms) == 1
    assert world.hits(f"l-{action}") == 0


async def test_sdk_without_elicitation_keeps_the_token_flow(world: World) -> None:
    called = await _sdk_call(world, None, "l-token")
    assert _error_code(called) == "confirmation_required"
    assert "ct_" in called.structured_content["message"]
    assert world.hits("l-token") == 0


# -- raw HTTP ----------------------------------------------------------------------------


def _headers(world: World) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {world.key}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
    }


async def _open(world: World, version: str, capabilities: dict[str, Any]) -> dict[str, str]:
    init = rpc(
        "initialize",
        {
            "protocolVersion": version,
            "capabilities": capabilities,
            "clientInfo": {"name": "tests", "version": "1"},
        },
        id_=1,
    )
    opened = await world.http.post(world.a.url + PATH, json=init, headers=_headers(world))
    assert opened.status_code == 200, opened.text
    return {"MCP-Session-Id": opened.headers["mcp-session-id"], "MCP-Protocol-Version": version}


def _events(lines: list[str]) -> list[dict[str, Any]]:
    return [json.loads(line[5:]) for line in lines if line.startswith("data:")]


async def _call_answered_on(
    world: World, session: dict[str, str], order: str, answer_on: Gateway, action: str
) -> dict[str, Any]:
    """tools/call on A; the elicitation/create read from its stream is answered on
    ``answer_on``; the call's final JSON-RPC response."""
    call = rpc("tools/call", {"name": "delete_order", "arguments": {"order_id": order}})
    headers = _headers(world) | session
    async with world.http.stream("POST", world.a.url + PATH, json=call, headers=headers) as resp:
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        lines = resp.aiter_lines()
        async for line in lines:
            if line.startswith("data:"):
                ask = json.loads(line[5:])
                break
        assert ask["method"] == "elicitation/create", ask
        assert "ct_" not in json.dumps(ask)
        answered = await world.http.post(
            answer_on.url + PATH,
            json={"jsonrpc": "2.0", "id": ask["id"], "result": {"action": action}},
            headers=headers,
        )
        assert answered.status_code == 202, answered.text
        rest = [line async for line in lines]
    [final] = _events(rest)
    return dict(final)


async def test_the_answer_posted_to_the_other_replica_completes_the_call(world: World) -> None:
    session = await _open(world, "2025-06-18", {"elicitation": {}})
    final = await _call_answered_on(world, session, "l-cross", world.b, "accept")
    assert final["result"]["isError"] is False, final
    assert world.upstream.hits["DELETE /orders/l-cross"] == 1


async def test_a_declined_answer_on_the_other_replica_is_confirmation_declined(
    world: World,
) -> None:
    session = await _open(world, "2025-11-25", {"elicitation": {"form": {}}})
    final = await _call_answered_on(world, session, "l-cross-no", world.b, "decline")
    assert final["result"]["structuredContent"]["error_code"] == "confirmation_declined"
    assert world.hits("l-cross-no") == 0


async def test_an_unknown_or_foreign_answer_is_ignored(world: World) -> None:
    session = await _open(world, "2025-06-18", {"elicitation": {}})
    other = await _open(world, "2025-06-18", {"elicitation": {}})
    call = rpc("tools/call", {"name": "delete_order", "arguments": {"order_id": "l-foreign"}})
    headers = _headers(world) | session
    async with world.http.stream("POST", world.a.url + PATH, json=call, headers=headers) as resp:
        lines = resp.aiter_lines()
        async for line in lines:
            if line.startswith("data:"):
                ask = json.loads(line[5:])
                break
        for sender, request_id in ((other, ask["id"]), (session, "el_unknown")):
            ignored = await world.http.post(
                world.b.url + PATH,
                json={"jsonrpc": "2.0", "id": request_id, "result": {"action": "accept"}},
                headers=_headers(world) | sender,
            )
            assert ignored.status_code == 202
        assert world.hits("l-foreign") == 0
        declined = await world.http.post(
            world.b.url + PATH,
            json={"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "cancel"}},
            headers=headers,
        )
        assert declined.status_code == 202
        [final] = _events([line async for line in lines])
    assert final["result"]["structuredContent"]["error_code"] == "confirmation_declined"
    assert world.hits("l-foreign") == 0


@pytest.mark.parametrize(
    ("version", "capabilities", "accept"),
    [
        ("2025-03-26", {"elicitation": {}}, "application/json, text/event-stream"),
        ("2025-11-25", {}, "application/json, text/event-stream"),
        ("2025-11-25", {"elicitation": {"url": {}}}, "application/json, text/event-stream"),
        ("2025-11-25", {"elicitation": {"form": {}}}, "application/json"),
    ],
)
async def test_otherwise_the_token_flow_stays(  # 2025-03-26, no form, no SSE
    world: World, version: str, capabilities: dict[str, Any], accept: str
) -> None:
    session = await _open(world, version, capabilities)
    call = rpc("tools/call", {"name": "delete_order", "arguments": {"order_id": "l-other"}})
    answered = await world.http.post(
        world.a.url + PATH, json=call, headers=_headers(world) | session | {"Accept": accept}
    )
    assert answered.status_code == 200, answered.text
    sse = answered.headers["content-type"].startswith("text/event-stream")
    body = _events(answered.text.splitlines())[0] if sse else answered.json()
    token_of(body["result"])
    assert world.hits("l-other") == 0


async def test_no_answer_within_the_elicitation_ttl_is_confirmation_declined(
    world: World,
) -> None:
    """Gateway B's CRANK_ELICITATION_TTL_S is 2: the call ends declined, nothing runs."""
    init = rpc(
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {}},
            "clientInfo": {"name": "tests", "version": "1"},
        },
        id_=1,
    )
    opened = await world.http.post(world.b.url + PATH, json=init, headers=_headers(world))
    session = {
        "MCP-Session-Id": opened.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    call = rpc("tools/call", {"name": "delete_order", "arguments": {"order_id": "l-late"}})
    started = time.monotonic()
    answered = await world.http.post(
        world.b.url + PATH, json=call, headers=_headers(world) | session
    )
    assert time.monotonic() - started >= 1.5
    ask, final = _events(answered.text.splitlines())
    assert ask["method"] == "elicitation/create"
    assert final["result"]["structuredContent"]["error_code"] == "confirmation_declined"
    late = await world.http.post(
        world.a.url + PATH,
        json={"jsonrpc": "2.0", "id": ask["id"], "result": {"action": "accept"}},
        headers=_headers(world) | session,
    )
    assert late.status_code == 202
    assert world.hits("l-late") == 0
