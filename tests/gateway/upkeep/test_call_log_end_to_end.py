"""The call log end to end: tools/calls through a real gateway process show up
in GET .../calls, and a gateway killed outright loses at most its last batch."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.db import connect
from shared.keys import display_prefix
from tests.support.api import Client, auth, make_token
from tests.support.gateway import run_gateway, wait_until
from tests.support.mcp import bearer
from tests.support.rates import PATH, Upstream, call_body, open_session_at, seed, serve_rates

CALLS = "/api/v1/workspaces/default/calls"
FLUSH_S = 1.0  # CRANK_CALL_LOG_FLUSH_MS default


@pytest.fixture
async def rates_upstream() -> AsyncIterator[Upstream]:
    async with serve_rates() as state:
        yield state


async def tool_call(http: httpx.AsyncClient, headers: dict[str, str], arguments: Any) -> Any:
    response = await http.post(PATH, json=call_body("latest_rate", arguments), headers=headers)
    assert response.status_code == 200, response.text
    return response.json()["result"]


async def test_ok_invalid_and_upstream_error_calls_appear_in_the_call_log(
    client: Client,
    admin_token: str,
    database_url: str,
    tmp_path: Path,
    rates_upstream: Upstream,
) -> None:
    key = await seed(client, admin_token, rates_upstream.port, rates_upstream.port)
    env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{rates_upstream.port}"}
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=20) as http,
    ):
        session = {**bearer(key), "MCP-Session-Id": await open_session_at(http, key)}
        ok = await tool_call(http, session, {"base": "USD", "quote": "EUR"})
        invalid = await tool_call(http, session, {"base": "usd"})
        rates_upstream.unavailable = True
        down = await tool_call(http, session, {"base": "USD", "quote": "EUR"})
        unknown = await http.post(PATH, json=call_body("no_such_tool", {}), headers=session)
        assert unknown.json()["error"]["code"] == -32602  # not a call log entry

        async def logged() -> bool:
            response = await client.get(CALLS, headers=auth(admin_token))
            return len(response.json()["items"]) >= 3

        await wait_until(logged, timeout_s=2 * FLUSH_S + 3)

    assert ok["isError"] is False
    items = (await client.get(CALLS, headers=auth(admin_token))).json()["items"]
    assert [
        (c["outcome"], c["upstream_status"], c["attempts"], c["upstream_ms"] is None) for c in items
    ] == [
        ("upstream_unavailable", 503, 1, False),
        ("invalid_arguments", None, 0, True),
        ("ok", 200, 1, False),
    ]
    assert {(c["agent"], c["tool"], c["tool_version"]) for c in items} == {
        ("rates", "latest_rate", 1)
    }
    assert {c["key_prefix"] for c in items} == {display_prefix(key)}
    assert [c["request_id"] for c in items[:2]] == [
        down["structuredContent"]["request_id"],
        invalid["structuredContent"]["request_id"],
    ]
    assert all(c["duration_ms"] >= (c["upstream_ms"] or 0) for c in items)

    only_ok = (await client.get(f"{CALLS}?outcome=ok", headers=auth(admin_token))).json()
    assert [c["id"] for c in only_ok["items"]] == [items[2]["id"]]
    first = (await client.get(f"{CALLS}?limit=2", headers=auth(admin_token))).json()
    rest = (
        await client.get(
            f"{CALLS}?limit=2&cursor={first['next_cursor']}", headers=auth(admin_token)
        )
    ).json()
    assert [c["id"] for c in first["items"] + rest["items"]] == [c["id"] for c in items]
    assert rest["next_cursor"] is None

    viewer = await make_token(database_url, "viewer", "default")
    assert len((await client.get(CALLS, headers=auth(viewer))).json()["items"]) == 3
    assert (
        await client.post("/api/v1/workspaces", json={"slug": "b"}, headers=auth(admin_token))
    ).is_success
    outsider = await make_token(database_url, "owner", "b")
    refused = await client.get(CALLS, headers=auth(outsider))
    assert (refused.status_code, refused.json()["code"]) == (404, "not_found")


async def test_a_killed_gateway_loses_at_most_the_calls_of_its_last_flush_interval(
    client: Client,
    admin_token: str,
    database_url: str,
    tmp_path: Path,
    rates_upstream: Upstream,
) -> None:
    key = await seed(client, admin_token, rates_upstream.port, rates_upstream.port)
    answered: list[tuple[str, float]] = []  # (request_id, when the answer arrived)
    async with (
        run_gateway(database_url, tmp_path, extra_env={"CRANK_RATE_LIMIT": "off"}) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=20) as http,
    ):
        session = {**bearer(key), "MCP-Session-Id": await open_session_at(http, key)}
        until = time.monotonic() + 2.5 * FLUSH_S
        while time.monotonic() < until:
            failed = await tool_call(http, session, {"base": "usd"})  # no upstream: fast
            answered.append((failed["structuredContent"]["request_id"], time.monotonic()))
        os.killpg(gateway.process.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        await asyncio.to_thread(gateway.process.wait, 10)

    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT request_id FROM call_log")
        stored = {r["request_id"] for r in await cur.fetchall()}
    # Everything answered more than one interval (plus scheduling slack) before
    # the kill was flushed; only the tail may be missing.
    settled = {rid for rid, at in answered if at < killed_at - FLUSH_S - 0.5}
    assert settled, "the test made no calls early enough to have been flushed"
    assert settled <= stored
    assert stored <= {rid for rid, _ in answered}
