"""The gateway's /metrics (its own port): per-tool calls by outcome and the
upstream latency histogram, after real tools/calls through a real process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from mcp_gateway.upkeep.metrics import method_class
from tests.support.api import Client
from tests.support.gateway import run_gateway
from tests.support.mcp import bearer
from tests.support.metrics import labels, parse_samples
from tests.support.rates import PATH, Upstream, call_body, open_session_at, seed, serve_rates

AGENT = "default/rates"
BACKGROUND_TASKS = (
    "approval_claims",
    "approval_expiry",
    "approval_wait_poll",
    "body_read_deadlines",
    "elicitation_wait_poll",
    "call_log_flush",
    "last_use_api_keys",
    "replica_heartbeat",
    "retention",
    "session_terminations",
    "snapshot_listen",
    "snapshot_poll",
    "webhook_deliveries",
)


@pytest.fixture
async def rates_upstream() -> AsyncIterator[Upstream]:
    async with serve_rates() as state:
        yield state


async def test_metrics_count_tool_calls_by_outcome_and_time_the_upstream(
    client: Client, admin_token: str, database_url: str, tmp_path: Path, rates_upstream: Upstream
) -> None:
    key = await seed(client, admin_token, rates_upstream.port, rates_upstream.port)
    env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{rates_upstream.port}"}
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=20) as http,
    ):
        session = {**bearer(key), "MCP-Session-Id": await open_session_at(http, key)}
        good = {"base": "USD", "quote": "EUR"}
        for arguments in (good, good, {"base": "usd"}):
            await http.post(PATH, json=call_body("latest_rate", arguments), headers=session)
        rates_upstream.unavailable = True
        await http.post(PATH, json=call_body("latest_rate", good), headers=session)
        await http.post(PATH, json=call_body("no_such_tool", {}), headers=session)

        scraped = await http.get(f"http://127.0.0.1:{gateway.metrics_port}/metrics")

    assert scraped.status_code == 200
    found = parse_samples(scraped.text)
    calls = "crank_tool_calls_total"
    assert found[(calls, labels(agent=AGENT, tool="latest_rate", outcome="ok"))] == 2
    assert found[(calls, labels(agent=AGENT, tool="latest_rate", outcome="invalid_arguments"))] == 1
    assert (
        found[(calls, labels(agent=AGENT, tool="latest_rate", outcome="upstream_unavailable"))] == 1
    )
    assert not any(name == calls and ("tool", "no_such_tool") in tags for name, tags in found)
    # Only calls that reached the upstream are timed: not the invalid one.
    histogram = labels(agent=AGENT, tool="latest_rate")
    assert found[("crank_upstream_request_seconds_count", histogram)] == 3
    assert found[("crank_upstream_request_seconds_sum", histogram)] > 0
    assert found[("crank_call_log_dropped_total", frozenset())] == 0
    assert "# TYPE crank_rate_limited_total counter" in scraped.text
    # Every background loop shows, at zero while it has not failed.
    failures = {
        dict(tags)["task"]: value
        for (name, tags), value in found.items()
        if name == "crank_background_failures_total"
    }
    assert failures == dict.fromkeys(BACKGROUND_TASKS, 0)


def test_rate_limit_method_classes_are_tools_call_and_other() -> None:
    assert [method_class(m) for m in ("tools/call", "tools/list", "ping")] == [
        "tools_call",
        "other",
        "other",
    ]
