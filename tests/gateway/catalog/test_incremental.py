"""Snapshot builds redo only what changed (docs/architecture.md, "Snapshot and refresh"):
a key or a secret compiles nothing, a publish compiles its one version and
rebuilds only its workspace's agents, and the result equals a build from
nothing. Then the same through a running gateway: LISTEN and polling alone."""

from __future__ import annotations

import gc
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_gateway.catalog.builder import SnapshotBuilder, load_snapshot
from mcp_gateway.catalog.snapshot import Snapshot, SnapshotOptions
from shared.crypto import SecretBox
from shared.db import connect
from tests.support.api import Client, auth
from tests.support.db import TEST_SECRET_KEY
from tests.support.gateway import FRANKFURTER, change_agent, run_gateway, seed_catalog, wait_until
from tests.support.mcp import INIT, TOOLS_LIST, bearer

DEFAULT = "/api/v1/workspaces/default"
SECOND = "/api/v1/workspaces/second"
SOLO = "/mcp/v1/second/solo"
OPTIONS = SnapshotOptions(box=SecretBox(TEST_SECRET_KEY))


async def ok(response: Any) -> Any:
    assert response.is_success, response.text
    return response


async def publish_operation(client: Client, admin: str, base: str, description: str) -> None:
    """A new version of frankfurter_latest_rate in ``base``'s workspace."""
    path = f"{base}/operations/frankfurter_latest_rate"
    current = await ok(await client.get(path, headers=auth(admin)))
    draft = {**current.json()["draft"], "description": description}
    put = await ok(await client.put(path, json=draft, headers=auth(admin, current.headers["etag"])))
    await ok(await client.post(f"{path}/publish", headers=auth(admin, put.headers["etag"])))


async def seed_second(client: Client, admin: str) -> None:
    """Workspace second: the same operation, bound by agent solo; agent idle binds none."""
    h = auth(admin)
    await ok(await client.post("/api/v1/workspaces", json={"slug": "second"}, headers=h))
    op = await ok(await client.post(f"{SECOND}/operations", json=FRANKFURTER, headers=h))
    await ok(
        await client.post(
            f"{SECOND}/operations/frankfurter_latest_rate/publish",
            headers=auth(admin, op.headers["etag"]),
        )
    )
    for slug, bound in (("solo", ["frankfurter_latest_rate"]), ("idle", [])):
        body = {"slug": slug, "operations": bound}
        agent = await ok(await client.post(f"{SECOND}/agents", json=body, headers=h))
        await ok(
            await client.post(
                f"{SECOND}/agents/{slug}/publish", headers=auth(admin, agent.headers["etag"])
            )
        )


@pytest.fixture
async def seeded(client: Client, admin_token: str) -> str:
    await seed_catalog(client, admin_token)
    await seed_second(client, admin_token)
    return admin_token


async def build(builder: SnapshotBuilder, database_url: str) -> Snapshot:
    async with await connect(database_url, autocommit=True) as conn:
        return await builder.build(conn)


async def test_a_key_compiles_nothing_and_rebuilds_no_agent(
    client: Client, seeded: str, database_url: str
) -> None:
    builder = SnapshotBuilder(OPTIONS)
    frozen = gc.get_freeze_count()
    before = await build(builder, database_url)
    assert builder.last.full
    assert builder.last.compiled == 2  # one version per workspace, shared by its agents
    assert gc.get_freeze_count() > frozen  # the first build is frozen out of the cyclic GC
    created = await ok(
        await client.post(f"{SECOND}/keys", json={"agent": "solo"}, headers=auth(seeded))
    )
    after = await build(builder, database_url)
    assert not builder.last.full
    assert (builder.last.compiled, builder.last.agents_rebuilt) == (0, 0)
    assert after.version > before.version
    assert after.agents is before.agents  # not one agent, tool or page was made again
    assert created.json()["id"] in {k.id for k in after.keys.values()}
    assert len(after.keys) == len(before.keys) + 1

    await ok(await client.delete(f"{SECOND}/keys/{created.json()['id']}", headers=auth(seeded)))
    revoked = await build(builder, database_url)
    assert created.json()["id"] not in {k.id for k in revoked.keys.values()}
    assert revoked.agents is before.agents


async def test_a_publish_compiles_one_tool_and_rebuilds_only_its_workspace(
    client: Client, seeded: str, database_url: str
) -> None:
    builder = SnapshotBuilder(OPTIONS)
    before = await build(builder, database_url)
    await publish_operation(client, seeded, SECOND, "Gets the latest rates. Version two.")
    after = await build(builder, database_url)
    assert builder.last.compiled == 1
    assert builder.last.agents_rebuilt == 1  # solo; idle, in the same workspace, binds none
    for name in (("default", "currency-rates"), ("default", "other"), ("second", "idle")):
        assert after.agents[name] is before.agents[name]
    solo, old_solo = after.agents["second", "solo"], before.agents["second", "solo"]
    assert solo.tools[0].version == old_solo.tools[0].version + 1
    assert solo.tools[0].definition["description"] == "Gets the latest rates. Version two."
    assert solo.fingerprint != old_solo.fingerprint
    assert b"Version two." in solo.pages[0]


async def test_a_secret_keeps_the_compiled_tools_and_pages(
    client: Client, seeded: str, database_url: str
) -> None:
    builder = SnapshotBuilder(OPTIONS)
    before = await build(builder, database_url)
    await ok(
        await client.put(
            f"{DEFAULT}/secrets/RATES_TOKEN", json={"value": "s3cret-value"}, headers=auth(seeded)
        )
    )
    after = await build(builder, database_url)
    assert builder.last.compiled == 0
    rates, old = (
        after.agents["default", "currency-rates"],
        before.agents["default", "currency-rates"],
    )
    assert rates.secrets == {"RATES_TOKEN": "s3cret-value"}
    assert rates.tools[0] is old.tools[0]
    assert rates.pages is old.pages
    for name in (("second", "solo"), ("second", "idle"), ("default", "unpublished")):
        assert after.agents[name] is before.agents[name]


def _shape(snapshot: Snapshot) -> dict[str, Any]:
    """What a snapshot serves, comparable between two builds."""
    return {
        "version": snapshot.version,
        "agents": {
            name: (
                a.id,
                a.published,
                a.title,
                a.rate_limit,
                [(t.name, t.operation_id, t.version) for t in a.tools],
                a.pages,
                a.modern_pages,
                a.fingerprint,
                dict(a.secrets),
                a.egress,
            )
            for name, a in snapshot.agents.items()
        },
        "by_id": sorted(snapshot.agents_by_id),
        "keys": snapshot.keys,
    }


async def test_a_run_of_changes_builds_what_a_build_from_nothing_builds(
    client: Client, seeded: str, database_url: str
) -> None:
    builder = SnapshotBuilder(OPTIONS)
    await build(builder, database_url)
    h = auth(seeded)
    await ok(await client.post(f"{DEFAULT}/keys", json={"agent": "other"}, headers=h))
    await publish_operation(client, seeded, DEFAULT, "Gets the latest rates, again.")
    await build(builder, database_url)
    await ok(await client.put(f"{SECOND}/secrets/TOKEN", json={"value": "v"}, headers=h))
    await change_agent(client, seeded, {"title": "Renamed", "operations": []}, slug="other")
    agent = await ok(await client.get(f"{SECOND}/agents/solo", headers=h))
    await ok(
        await client.delete(f"{SECOND}/agents/solo", headers=auth(seeded, agent.headers["etag"]))
    )
    incremental = await build(builder, database_url)
    assert ("second", "solo") not in incremental.agents
    async with await connect(database_url, autocommit=True) as conn:
        fresh = await load_snapshot(conn, OPTIONS)
    assert _shape(incremental) == _shape(fresh)


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{name} ([0-9.e+]+)$", text, re.MULTILINE)
    assert found, f"{name} not exported"
    return float(found.group(1))


@pytest.mark.parametrize("listen", [True, False], ids=["listen", "polling"])
async def test_a_running_gateway_sees_a_key_without_compiling_and_a_publish_at_once(
    client: Client, seeded: str, database_url: str, tmp_path: Path, listen: bool
) -> None:
    key = (
        await ok(await client.post(f"{SECOND}/keys", json={"agent": "solo"}, headers=auth(seeded)))
    ).json()["key"]
    # With LISTEN the poll is a minute away: only the notification can show the changes.
    env = {"CRANK_MCP_LISTEN": "true" if listen else "false"}
    async with (
        run_gateway(
            database_url, tmp_path, refresh_ms=60_000 if listen else 300, extra_env=env
        ) as gateway,
        httpx.AsyncClient(base_url=gateway.url) as http,
    ):
        metrics = f"http://127.0.0.1:{gateway.metrics_port}/metrics"

        async def read(name: str) -> float:
            return _metric((await http.get(metrics)).text, name)

        compiled = await read("crank_snapshot_tools_compiled_total")
        version = await read("crank_snapshot_version")
        await ok(
            await client.post(f"{DEFAULT}/keys", json={"agent": "other"}, headers=auth(seeded))
        )

        async def reloaded() -> bool:
            return await read("crank_snapshot_version") > version

        await wait_until(reloaded, timeout_s=5)
        assert await read("crank_snapshot_tools_compiled_total") == compiled

        opened = await http.post(SOLO, json=INIT, headers=bearer(key))
        assert opened.status_code == 200, opened.text
        session = opened.headers["mcp-session-id"]
        await publish_operation(client, seeded, SECOND, "Gets rates: the new version.")

        async def listed() -> bool:
            response = await http.post(
                SOLO,
                json=TOOLS_LIST,
                headers={**bearer(key), "MCP-Session-Id": session},
            )
            return "the new version" in response.json()["result"]["tools"][0]["description"]

        await wait_until(listed, timeout_s=5)
        assert await read("crank_snapshot_tools_compiled_total") == compiled + 1
