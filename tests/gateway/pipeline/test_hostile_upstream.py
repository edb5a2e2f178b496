"""Hostile upstream answers through a real gateway process (docs/security.md, "Upstream answers").

A loopback aiohttp upstream answers 10 MB of ``[{},{},...]``, a 10 MB object of
800 000 keys, an array nested 100 000 deep, and an honest large answer of
which the select keeps a little. Every operation sends a workspace secret, so
masking runs on every answer. For each call the test measures the gateway
worker's peak RSS above where it started (the kernel's VmHWM, reset before the
call) and times ``/healthz`` sent again and again while the call runs.

Before the fix the first answer took a worker from 91 MB to 584 MB and blocked
its loop for 1.2 s (issue 11); with masking after capping, still +250 MB and
1.6 s. Now about +21 MB and a /healthz within tens of milliseconds.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from aiohttp import web
from litestar import Litestar
from litestar.testing import AsyncTestClient

from tests.support.api import auth, grant_egress, make_token
from tests.support.db import emptied_run_database
from tests.support.gateway import Gateway, run_gateway, serve_upstream
from tests.support.processes import largest_descendant
from tests.support.tool_calls import (
    BASE,
    Caller,
    assert_tool_error,
    ok,
    publish_agent,
    publish_operation,
)
from tests.support.worker_health import PeakMemory, probing_health

PATH = "/mcp/v1/default/hostile"
SECRET = "s3cr3t-hostile-token-7f2c"
TEN_MIB = 10 * 1024 * 1024
# docs/security.md, "Upstream answers": twice the raw limit plus the decoded budget
# (about 20 MB at 250 000 values), under 40 MB at the 10 MiB ceiling. The bug cost
# some 500 MB; the slack is for a noisy shared machine.
MAX_GROWTH_MIB = 60
# A concurrent /healthz answers within 100 ms; the slack is for a noisy shared
# 2-core machine, the bug stalled the loop for 1.2 s.
MAX_HEALTH_MS = 400

EMPTIES = b"[" + b"{}," * (TEN_MIB // 3 - 1) + b"{}]"
WIDE_OBJECT = b"{" + b",".join(b'"k%07d":1' % i for i in range(800_000)) + b"}"
DEEP = b"[" * 100_000 + b"]" * 100_000
WITHIN_BUDGET = b"[" + b"{}," * 119_999 + b"{}]"  # counted 240 001: decoded in full
RECORDS = [{"id": i, "note": f"echo {SECRET}", "extra": "x" * 50} for i in range(200)]
BLOB = "y" * (9 * 1024 * 1024)
ANSWERS = {"empties": EMPTIES, "object": WIDE_OBJECT, "deep": DEEP, "within": WITHIN_BUDGET}


def _operation(name: str, path: str, **response: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Gets a hostile test answer ({name}). Use when a test asks for it.",
        "input": {"type": "object", "properties": {}, "additionalProperties": False},
        "request": {
            "method": "GET",
            "url": path,
            "auth": {"type": "bearer", "secret": "api_token"},
        },
        "response": response,
        "execution_config": {"timeout_ms": 20000, "retries": 0},
    }


def operations(port: int) -> list[dict[str, Any]]:
    up = f"http://127.0.0.1:{port}"
    whole = {"max_raw_bytes": TEN_MIB + 1024}  # the whole body is read
    return [
        *(_operation(name, f"{up}/{name}", **whole) for name in ANSWERS),
        _operation("empties_default", f"{up}/empties"),  # the derived limit: 1 MiB
        _operation("records", f"{up}/records", select="items[].{id: id, note: note}", **whole),
    ]


async def upstream(request: web.Request) -> web.StreamResponse:
    name = request.match_info["name"]
    if name == "records":
        return web.json_response({"items": RECORDS, "blob": BLOB})
    return web.Response(body=ANSWERS[name], content_type="application/json")


@dataclass
class World:
    gateway: Gateway
    caller: Caller
    memory: PeakMemory


@pytest.fixture(scope="module")
async def world(
    pg_server_url: str, run_database: str, app: Litestar, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    url = emptied_run_database(pg_server_url, run_database)
    upstream_app = web.Application()
    upstream_app.router.add_get("/{name}", upstream)
    async with serve_upstream(upstream_app) as port:
        admin = await make_token(url, "admin")
        specs = operations(port)
        async with AsyncTestClient(app=app) as client:
            await ok(
                await client.post(
                    "/api/v1/workspaces", json={"slug": "default"}, headers=auth(admin)
                )
            )
            await ok(
                await client.put(
                    f"{BASE}/secrets/api_token", json={"value": SECRET}, headers=auth(admin)
                )
            )
            for spec in specs:
                await publish_operation(client, admin, spec)
            key = await publish_agent(client, admin, "hostile", [s["name"] for s in specs])
            await grant_egress(client, admin, "default", f"127.0.0.1:{port}")
        env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{port}", "CRANK_RATE_LIMIT": "off"}
        async with (
            run_gateway(url, tmp_path_factory.mktemp("hostile"), extra_env=env) as gateway,
            httpx.AsyncClient(base_url=gateway.url, timeout=60) as http,
        ):
            caller = Caller(http, PATH, key)
            # Warm up: the first call pays for imports and connections, not the answer.
            assert_tool_error(
                await caller.call("modern", "empties_default", {}), "upstream_response_too_large"
            )
            yield World(gateway, caller, PeakMemory(largest_descendant(gateway.process.pid)))


async def measured_call(world: World, tool: str) -> tuple[dict[str, Any], float, float]:
    """The tool result, the worker's peak RSS growth (MiB) and the worst /healthz (ms)."""
    world.memory.reset()
    async with probing_health(world.gateway.url) as health:
        await asyncio.sleep(0.05)
        result = await world.caller.call("modern", tool, {})
    assert health.failures == 0
    assert health.latencies_s, "the call ended before /healthz was timed"
    return result, world.memory.growth_mib, health.worst_ms


@pytest.mark.parametrize(
    ("tool", "code"),
    [
        ("empties", "upstream_response_too_large"),  # 3.5 million values
        ("object", "upstream_response_too_large"),  # 800 000 keys
        ("deep", "upstream_response_invalid"),  # deeper than the decoder goes
        ("empties_default", "upstream_response_too_large"),  # over the derived raw limit
    ],
)
async def test_a_hostile_answer_is_refused_within_bounds(
    world: World, tool: str, code: str
) -> None:
    result, growth_mib, worst_ms = await measured_call(world, tool)
    assert_tool_error(result, code)
    assert growth_mib < MAX_GROWTH_MIB, f"{tool}: worker peak RSS grew {growth_mib:.0f} MiB"
    assert worst_ms < MAX_HEALTH_MS, f"{tool}: /healthz took {worst_ms:.0f} ms"


async def test_an_answer_within_the_budget_is_decoded_and_trimmed_within_bounds(
    world: World,
) -> None:
    result, growth_mib, worst_ms = await measured_call(world, "within")
    assert result["structuredContent"] == [{}] * 50
    assert result["_meta"]["crank/truncated"] is True
    assert growth_mib < MAX_GROWTH_MIB, f"worker peak RSS grew {growth_mib:.0f} MiB"
    assert worst_ms < MAX_HEALTH_MS, f"/healthz took {worst_ms:.0f} ms"


async def test_a_large_honest_answer_is_selected_trimmed_and_masked(world: World) -> None:
    result, growth_mib, worst_ms = await measured_call(world, "records")
    assert result.get("isError") is not True, result
    items = result["structuredContent"]
    assert [item["id"] for item in items] == list(range(50))  # max_items
    assert {item["note"] for item in items} == {"echo ****"}
    assert result["_meta"]["crank/truncated"] is True
    assert SECRET not in str(result)
    assert growth_mib < MAX_GROWTH_MIB, f"worker peak RSS grew {growth_mib:.0f} MiB"
    assert worst_ms < MAX_HEALTH_MS, f"/healthz took {worst_ms:.0f} ms"


async def test_answers_in_flight_together_stay_within_their_bounds(world: World) -> None:
    """Four hostile answers at once: each costs its own bound, and the loop keeps serving."""
    world.memory.reset()
    tools = ("empties", "object", "empties", "object")
    async with probing_health(world.gateway.url) as health:
        results = await asyncio.gather(*(world.caller.call("modern", t, {}) for t in tools))
    for result in results:
        assert_tool_error(result, "upstream_response_too_large")
    assert health.failures == 0
    growth_mib = world.memory.growth_mib
    assert growth_mib < len(tools) * MAX_GROWTH_MIB / 2, f"peak RSS grew {growth_mib:.0f} MiB"
    assert health.worst_ms < MAX_HEALTH_MS, f"/healthz took {health.worst_ms:.0f} ms"
