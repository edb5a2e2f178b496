"""Snapshot loads from a read replica (CRANK_SNAPSHOT_DATABASE_URL): the load reads
the replica, everything else the primary.

No streaming replica here: the "replica" and the "primary" are two databases of
the test server holding different catalogs, so which one a snapshot came from
shows in what the gateway serves.
"""

from __future__ import annotations

from pathlib import Path

import httpx

from mcp_gateway.catalog.refresher import _REPLICA_PATIENCE, Refresher
from mcp_gateway.catalog.snapshot import Snapshot
from mcp_gateway.upkeep.health import DatabaseHealth
from shared.db import connect
from shared.migrate import migrate
from tests.support.api import Client
from tests.support.gateway import run_gateway
from tests.support.mcp import modern, request
from tests.support.metrics import Samples, labels, scrape
from tests.support.processes import free_port
from tests.support.rates import PATH, seed


async def catalog_version(url: str) -> int:
    async with await connect(url, autocommit=True) as conn:
        row = await (await conn.execute("SELECT version FROM catalog_state")).fetchone()
    assert row is not None
    return int(row["version"])


async def served_tools(gateway_url: str, key: str) -> list[str]:
    async with httpx.AsyncClient(base_url=gateway_url, timeout=20) as http:
        answer = await http.post(
            PATH, json=request("tools/list"), headers=modern(key, "tools/list")
        )
    assert answer.status_code == 200, answer.text
    return sorted(tool["name"] for tool in answer.json()["result"]["tools"])


def loads(found: Samples) -> dict[str, float]:
    return {
        source: found[("crank_snapshot_loads_total", labels(source=source))]
        for source in ("primary", "replica")
    }


async def test_the_gateway_serves_the_catalog_of_the_snapshot_database(
    client: Client, admin_token: str, database_url: str, empty_database_url: str, tmp_path: Path
) -> None:
    key = await seed(client, admin_token, free_port(), free_port())  # the "replica" has it
    await migrate(empty_database_url)  # the "primary": the schema, no catalog
    env = {"CRANK_SNAPSHOT_DATABASE_URL": database_url}
    async with run_gateway(empty_database_url, tmp_path, extra_env=env) as gateway:
        tools = await served_tools(gateway.url, key)
        found = await scrape(gateway.metrics_port)

    assert tools == ["blocked_rate", "latest_rate"]
    assert loads(found)["replica"] >= 1
    assert loads(found)["primary"] == 0


async def test_an_unreachable_snapshot_database_falls_back_to_the_primary(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    key = await seed(client, admin_token, free_port(), free_port())
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/nowhere"  # nothing listens
    env = {"CRANK_SNAPSHOT_DATABASE_URL": nowhere}
    async with run_gateway(database_url, tmp_path, extra_env=env) as gateway:
        tools = await served_tools(gateway.url, key)
        found = await scrape(gateway.metrics_port)

    assert tools == ["blocked_rate", "latest_rate"]
    assert loads(found) == {"primary": 1, "replica": 0}
    assert found[("crank_database_reachable", frozenset())] == 1


async def test_a_replica_behind_the_primary_is_waited_for_a_few_polls_then_skipped(
    client: Client, admin_token: str, database_url: str, empty_database_url: str
) -> None:
    await seed(client, admin_token, free_port(), free_port())  # the primary moves on
    await migrate(empty_database_url)  # a replica that never catches up
    primary, behind = await catalog_version(database_url), await catalog_version(empty_database_url)
    assert behind < primary
    swaps: list[int] = []

    def swapped(_old: Snapshot, new: Snapshot) -> None:
        swaps.append(new.version)

    refresher = Refresher(
        database_url,
        refresh_s=60,
        health=DatabaseHealth(),
        on_swap=swapped,
        snapshot_conninfo=empty_database_url,
    )
    try:
        await refresher.refresh()  # nothing loaded yet: the replica's snapshot serves
        for _ in range(_REPLICA_PATIENCE):
            await refresher.refresh()  # behind: dropped, the snapshot in memory stays
        assert swaps == [behind]
        await refresher.refresh()  # patience spent: this load reads the primary
        assert swaps == [behind, primary]
        assert ("default", "rates") in refresher.snapshot.agents
    finally:
        await refresher.stop()
