"""The demo seed: a valid file, published by ``crank seed-demo``, idempotent, and never
over what a user changed."""

from __future__ import annotations

import asyncio
import os
import sys
from typing import Any

import pytest

from control_plane.cli.seed import DemoSeed, seed_demo
from control_plane.demo import demo_sales_port, load_demo_file
from control_plane.services.apply import check_file
from shared.db import connect
from shared.settings import SettingsError
from tests.support.api import Client, auth


def test_demo_file_is_valid_and_calls_the_given_sales_port() -> None:
    file = load_demo_file(18123)

    assert check_file(file) == []
    sales_urls = [op.request.url for op in file.operations if op.name.startswith("sales_")]
    assert sales_urls
    assert all(url.startswith("http://127.0.0.1:18123/") for url in sales_urls)


def test_demo_file_has_the_documented_agents_and_safety() -> None:
    file = load_demo_file(8090)
    operations = {op.name: op for op in file.operations}
    agents = {agent.slug: agent.operations for agent in file.agents}

    assert agents["currency-rates"] == ["frankfurter_latest_rate"]
    assert (
        operations["frankfurter_latest_rate"].request.url == "https://api.frankfurter.dev/v1/latest"
    )
    assert operations["frankfurter_latest_rate"].request.query == {
        "base": "base",
        "symbols": "quote",
    }
    refund = operations["sales_create_refund"]
    assert refund.safety.approval is True
    assert refund.execution_config.idempotency is not None
    assert refund.execution_config.idempotency.argument == "request_id"
    assert refund.execution_config.idempotency.header == "Idempotency-Key"
    delete = operations["sales_delete_draft_order"]
    assert delete.request.method == "DELETE"
    assert delete.confirmation_required()
    assert {"sales_get_order", "sales_create_refund", "sales_delete_draft_order"} <= set(
        agents["sales"]
    )


def test_the_refund_arguments_an_approver_sees_carry_the_unit_and_currency() -> None:
    """Issue #27: the approver saw `amount 1200`, with neither unit nor currency."""
    refund = next(op for op in load_demo_file(8090).operations if op.name == "sales_create_refund")
    properties, required = refund.input["properties"], refund.input["required"]

    assert "amount" not in properties
    assert {"amount_minor_units", "currency"} <= set(required)
    assert "minor units" in properties["amount_minor_units"]["description"]
    assert properties["currency"]["pattern"] == "^[A-Z]{3}$"
    assert refund.request.body is not None
    assert "currency: currency" in refund.request.body
    assert "amount: amount_minor_units" in refund.request.body


def test_every_demo_parameter_is_described() -> None:
    for op in load_demo_file(8090).operations:
        for name, schema in op.input["properties"].items():
            assert schema.get("description"), f"{op.name}.{name} has no description"


def test_demo_sales_port_comes_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CRANK_DEMO_SALES_PORT", raising=False)
    assert demo_sales_port() == 8090
    monkeypatch.setenv("CRANK_DEMO_SALES_PORT", "18555")
    assert demo_sales_port() == 18555
    monkeypatch.setenv("CRANK_DEMO_SALES_PORT", "eighty")
    with pytest.raises(SettingsError):
        demo_sales_port()


async def _snapshot(database_url: str) -> dict[str, Any]:
    """Everything a seed could change: rows, revisions, versions, audit, catalog version."""
    async with await connect(database_url) as conn:
        queries = {
            "catalog": "SELECT version FROM catalog_state",
            "audit": "SELECT count(*) AS n FROM audit_log",
            "workspaces": "SELECT slug, title FROM workspaces ORDER BY slug",
            "operations": "SELECT name, revision, latest_version FROM operations ORDER BY name",
            "versions": "SELECT count(*) AS n FROM operation_versions",
            "agents": "SELECT slug, revision, published_version FROM agents ORDER BY slug",
        }
        snapshot = {}
        for key, query in queries.items():
            cur = await conn.execute(query)
            snapshot[key] = await cur.fetchall()
    return snapshot


async def _seed_demo_command(database_url: str) -> str:
    env = {**os.environ, "CRANK_DATABASE_URL": database_url, "CRANK_DEMO_SALES_PORT": "18124"}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "control_plane.cli",
        "seed-demo",
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), timeout=60)
    assert process.returncode == 0, stderr.decode()
    return stdout.decode()


async def test_seed_demo_twice_changes_nothing_the_second_time(database_url: str) -> None:
    first_output = await _seed_demo_command(database_url)
    after_first = await _snapshot(database_url)
    second_output = await _seed_demo_command(database_url)
    after_second = await _snapshot(database_url)

    assert "changed" in first_output.splitlines()[0]
    assert "unchanged" in second_output.splitlines()[0]
    assert after_second == after_first
    assert after_first["workspaces"] == [{"slug": "default", "title": "Demo"}]
    assert after_first["versions"] == [{"n": 5}]
    assert {row["slug"] for row in after_first["agents"]} == {"currency-rates", "sales"}


async def test_seeded_demo_agents_are_published(
    database_url: str, client: Client, admin_token: str
) -> None:
    async with await connect(database_url) as conn:
        seed = await seed_demo(conn, sales_port=18125)
        await conn.commit()

    assert seed.plan.changed
    for slug in ("currency-rates", "sales"):
        response = await client.get(
            f"/api/v1/workspaces/default/agents/{slug}", headers=auth(admin_token)
        )
        assert response.status_code == 200
        agent = response.json()
        assert agent["published"] is not None
        assert agent["published"]["operations"] == agent["draft"]["operations"]


async def _seed(database_url: str) -> DemoSeed:
    async with await connect(database_url) as conn:
        seed = await seed_demo(conn, sales_port=18127)
        await conn.commit()
    return seed


async def _audit_count(database_url: str) -> int:
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM audit_log")
        row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def test_a_second_seed_keeps_what_the_user_changed_and_deleted(
    database_url: str, client: Client, admin_token: str
) -> None:
    """The quickstart's step 4 (one more operation on currency-rates, published as v2),
    and the sales agent deleted: the next seed (the next ``crank up``) writes nothing."""
    await _seed(database_url)
    agents = "/api/v1/workspaces/default/agents"
    current = await client.get(f"{agents}/currency-rates", headers=auth(admin_token))
    draft = {
        **current.json()["draft"],
        "operations": ["frankfurter_latest_rate", "sales_get_order"],
    }
    edited = await client.put(
        f"{agents}/currency-rates", json=draft, headers=auth(admin_token, current.headers["etag"])
    )
    assert edited.status_code == 200, edited.text
    published = await client.post(
        f"{agents}/currency-rates/publish", headers=auth(admin_token, edited.headers["etag"])
    )
    assert published.json()["published_version"] == 2, published.text
    sales = await client.get(f"{agents}/sales", headers=auth(admin_token))
    deleted = await client.delete(
        f"{agents}/sales", headers=auth(admin_token, sales.headers["etag"])
    )
    assert deleted.status_code == 204, deleted.text
    before = await _snapshot(database_url)
    audit_before = await _audit_count(database_url)

    seed = await _seed(database_url)

    assert seed.created == []
    assert not seed.plan.changed
    assert "agent currency-rates" in seed.kept
    assert seed.deleted == ["agent sales"]
    assert await _snapshot(database_url) == before
    assert await _audit_count(database_url) == audit_before
    agent = (await client.get(f"{agents}/currency-rates", headers=auth(admin_token))).json()
    assert agent["published_version"] == 2
    assert agent["published"]["operations"] == ["frankfurter_latest_rate", "sales_get_order"]
    gone = await client.get(f"{agents}/sales", headers=auth(admin_token))
    assert gone.status_code == 404


async def test_the_seed_creates_a_demo_object_it_never_created_before(database_url: str) -> None:
    """A database seeded before the seed kept its record (or by an older demo file that
    lacked an object): the missing object is created, the existing ones are not touched."""
    await _seed(database_url)
    async with await connect(database_url) as conn:
        await conn.execute("DELETE FROM agents WHERE slug = 'sales'")
        await conn.execute("DELETE FROM demo_seeded")
        await conn.commit()
    before = await _snapshot(database_url)

    seed = await _seed(database_url)

    assert seed.created == ["agent sales"]
    after = await _snapshot(database_url)
    assert after["operations"] == before["operations"]
    assert [a for a in after["agents"] if a["slug"] == "currency-rates"] == [
        a for a in before["agents"] if a["slug"] == "currency-rates"
    ]
    assert {a["slug"] for a in after["agents"]} == {"currency-rates", "sales"}
