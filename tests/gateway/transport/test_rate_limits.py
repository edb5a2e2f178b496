"""Rate limits per key at real gateway processes, alone and as two replicas.

The calls carry invalid arguments on purpose: the limit is taken before the
arguments are checked, and an invalid call never reaches an upstream, so these
tests send nothing beyond loopback even if the pipeline were wrong.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx
import psycopg

from tests.support.api import Client
from tests.support.gateway import (
    SEED_URL_PATH,
    limit_agent,
    run_gateway,
    seed_catalog,
    wait_until,
)
from tests.support.mcp import INIT, bearer, modern, open_session, request

BASE = "/api/v1/workspaces/default"
CALL: dict[str, Any] = {
    "jsonrpc": "2.0",
    "id": 3,
    "method": "tools/call",
    "params": {"name": "frankfurter_latest_rate", "arguments": {"base": "not a code"}},
}
PING = {"jsonrpc": "2.0", "id": 4, "method": "ping"}


async def tools_call(http: httpx.AsyncClient, headers: dict[str, str]) -> httpx.Response:
    return await http.post(SEED_URL_PATH, json=CALL, headers=headers)


async def test_over_the_agents_limit_tools_call_gets_429_with_retry_after(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    catalog = await seed_catalog(client, admin_token)
    await limit_agent(client, admin_token, requests=3, per_seconds=60)
    async with (
        run_gateway(database_url, tmp_path) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as http,
    ):
        session = {
            **bearer(catalog.agent_key),
            "MCP-Session-Id": await open_session(http, catalog.agent_key),
        }
        answers = [await tools_call(http, session) for _ in range(5)]
        assert [a.status_code for a in answers] == [200, 200, 200, 429, 429]
        assert answers[0].json()["result"]["structuredContent"]["error_code"] == "invalid_arguments"
        refused = answers[3]
        assert int(refused.headers["retry-after"]) == 20  # one call every 20 s
        assert refused.json()["error"]["code"] == -32029
        assert refused.json()["error"]["data"] == {"retry_after_s": 20}
        assert refused.json()["id"] == 3

        # Other methods have their own, larger allowance; other keys their own buckets.
        assert (await http.post(SEED_URL_PATH, json=PING, headers=session)).status_code == 200
        other_path = "/mcp/v1/default/other"
        opened = await http.post(other_path, json=INIT, headers=bearer(catalog.other_key))
        other_session = {
            **bearer(catalog.other_key),
            "MCP-Session-Id": opened.headers["mcp-session-id"],
        }
        other = await http.post(other_path, json=CALL, headers=other_session)
        assert other.status_code == 200

        # The modern era shares the key's bucket.
        modern_call = await http.post(
            SEED_URL_PATH,
            json=request("tools/call", CALL["params"]),
            headers=modern(
                catalog.agent_key, "tools/call", **{"Mcp-Name": "frankfurter_latest_rate"}
            ),
        )
        assert modern_call.status_code == 429
        assert modern_call.headers["retry-after"]

        metrics = (await http.get(f"http://127.0.0.1:{gateway.metrics_port}/metrics")).text
        assert (
            'crank_rate_limited_total{agent="default/currency-rates",method_class="tools_call"} 3.0'
            in metrics
        )


async def test_crank_rate_limit_is_the_default_and_off_disables_it(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    catalog = await seed_catalog(client, admin_token)
    for setting, expected in (("2/60", [200, 200, 429]), ("off", [200] * 30)):
        async with (
            run_gateway(database_url, tmp_path, extra_env={"CRANK_RATE_LIMIT": setting}) as gateway,
            httpx.AsyncClient(base_url=gateway.url, timeout=10) as http,
        ):
            session = {
                **bearer(catalog.agent_key),
                "MCP-Session-Id": await open_session(http, catalog.agent_key),
            }
            statuses = [(await tools_call(http, session)).status_code for _ in expected]
            assert statuses == expected, setting


async def test_a_flood_of_other_requests_is_capped_too(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    catalog = await seed_catalog(client, admin_token)
    await limit_agent(client, admin_token, requests=2, per_seconds=3600)
    async with (
        run_gateway(database_url, tmp_path) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as http,
    ):
        session = {
            **bearer(catalog.agent_key),
            "MCP-Session-Id": await open_session(http, catalog.agent_key),
        }
        # initialize took one of the 20 (ten times the tools/call limit).
        statuses = [
            (await http.post(SEED_URL_PATH, json=PING, headers=session)).status_code
            for _ in range(20)
        ]
        assert statuses == [200] * 19 + [429]


async def live_replicas(gateway_url: str) -> int:
    async with httpx.AsyncClient() as http:
        return int((await http.get(f"{gateway_url}/readyz")).json()["replicas"])


async def test_two_replicas_share_one_limit_within_the_stated_tolerance(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    """docs/mcp-interface.md: with traffic spread evenly, the cluster admits the
    limit within one call per replica, plus what refills while the test runs."""
    catalog = await seed_catalog(client, admin_token)
    requests, per_seconds = 20, 60
    await limit_agent(client, admin_token, requests=requests, per_seconds=per_seconds)
    async with (
        run_gateway(database_url, tmp_path) as first,
        run_gateway(database_url, tmp_path) as second,
        httpx.AsyncClient(base_url=first.url, timeout=10) as one,
        httpx.AsyncClient(base_url=second.url, timeout=10) as two,
    ):

        async def both_see_two() -> bool:
            return await live_replicas(first.url) == 2 and await live_replicas(second.url) == 2

        await wait_until(both_see_two, timeout_s=10)
        session_id = await open_session(one, catalog.agent_key)
        session = {**bearer(catalog.agent_key), "MCP-Session-Id": session_id}
        started = time.monotonic()

        async def burst(http: httpx.AsyncClient) -> list[int]:
            return [(await tools_call(http, session)).status_code for _ in range(3 * requests)]

        statuses = [s for part in await asyncio.gather(burst(one), burst(two)) for s in part]
        elapsed = time.monotonic() - started
        admitted = statuses.count(200)
        refilled = requests * elapsed / per_seconds
        assert set(statuses) == {200, 429}
        assert requests - 2 <= admitted <= requests + 2 + refilled, (admitted, elapsed)


async def test_a_replica_that_stops_leaves_the_count_and_a_dead_one_ages_out(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    await seed_catalog(client, admin_token)
    async with run_gateway(database_url, tmp_path) as first:
        async with run_gateway(database_url, tmp_path):

            async def two() -> bool:
                return await live_replicas(first.url) == 2

            await wait_until(two, timeout_s=10)

        async def one() -> bool:
            return await live_replicas(first.url) == 1

        await wait_until(one, timeout_s=10)  # the stopped one deleted its row

        # A row that stopped beating (a killed process) drops out of the count.
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            await conn.execute(
                "INSERT INTO gateway_replicas (replica_id, heartbeat_at) "
                "VALUES ('dead', now() - interval '1 minute')"
            )
            rows: Any = await (
                await conn.execute("SELECT count(*) FROM gateway_replicas")
            ).fetchone()
            assert rows[0] == 2
        await asyncio.sleep(2.5)  # a heartbeat or two
        assert await live_replicas(first.url) == 1
