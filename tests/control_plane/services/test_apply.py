"""``POST /api/v1/workspaces/{ws}/apply``: plan, idempotence, dry runs, errors, roles."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import msgspec
import pytest

from control_plane.auth import Role, Workspace
from control_plane.services.apply import apply_file
from shared.db import connect
from shared.engine.spec import CrankFile
from tests.support.api import Client, auth, make_token
from tests.support.crank_files import APPLY, crank_file, delete_operation, rates_operation, snapshot


def actions(plan: dict[str, Any]) -> list[tuple[str, str, str, bool]]:
    return [(i["kind"], i["name"], i["action"], i["publish"]) for i in plan["items"]]


async def test_apply_creates_and_publishes_then_second_apply_changes_nothing(
    client: Client, acme: str, database_url: str
) -> None:
    first = await client.post(
        APPLY, params={"publish": "true"}, json=crank_file(), headers=auth(acme)
    )
    assert first.status_code == 200, first.text
    plan = first.json()
    assert plan["changed"] is True
    assert plan["dry_run"] is False
    assert plan["errors"] == []
    assert actions(plan) == [
        ("operation", "frankfurter_latest_rate", "create", True),
        ("operation", "delete_order", "create", True),
        ("agent", "currency-rates", "create", True),
    ]
    assert [item["version"] for item in plan["items"]] == [1, 1, 1]
    agent = await client.get("/api/v1/workspaces/acme/agents/currency-rates", headers=auth(acme))
    assert agent.status_code == 200, agent.text
    before = await snapshot(database_url)

    second = await client.post(
        APPLY, params={"publish": "true"}, json=crank_file(), headers=auth(acme)
    )
    assert second.status_code == 200, second.text
    assert second.json()["changed"] is False
    assert {item["action"] for item in second.json()["items"]} == {"unchanged"}
    assert not any(item["publish"] for item in second.json()["items"])
    assert [item["version"] for item in second.json()["items"]] == [1, 1, 1]
    assert await snapshot(database_url) == before


async def test_apply_with_publish_of_several_resources_bumps_the_catalog_exactly_once(
    client: Client, acme: str, database_url: str
) -> None:
    before = (await snapshot(database_url))["catalog"]
    first = await client.post(
        APPLY, params={"publish": "true"}, json=crank_file(), headers=auth(acme)
    )
    assert first.status_code == 200, first.text
    assert sum(item["publish"] for item in first.json()["items"]) == 3
    assert (await snapshot(database_url))["catalog"] == before + 1

    both_changed = crank_file(
        operations=[
            rates_operation(title="Exchange rate today"),
            delete_operation(title="Cancel an order"),
        ]
    )
    second = await client.post(
        APPLY, params={"publish": "true"}, json=both_changed, headers=auth(acme)
    )
    assert second.status_code == 200, second.text
    assert [item["publish"] for item in second.json()["items"]] == [True, True, False]
    assert (await snapshot(database_url))["catalog"] == before + 2


async def test_changing_one_description_updates_and_publishes_only_that_operation(
    client: Client, acme: str, database_url: str
) -> None:
    await client.post(APPLY, params={"publish": "true"}, json=crank_file(), headers=auth(acme))
    before = await snapshot(database_url)
    changed = crank_file()
    changed["operations"][1]["description"] = "Deletes one order. Use when asked to cancel it."

    response = await client.post(
        APPLY, params={"publish": "true"}, json=changed, headers=auth(acme)
    )
    assert response.status_code == 200, response.text
    assert actions(response.json()) == [
        ("operation", "frankfurter_latest_rate", "unchanged", False),
        ("operation", "delete_order", "update", True),
        ("agent", "currency-rates", "unchanged", False),
    ]
    assert response.json()["items"][1]["version"] == 2
    after = await snapshot(database_url)
    assert after["versions"] == before["versions"] + 1
    assert after["catalog"] == before["catalog"] + 1
    assert after["audit"] == before["audit"] + 2  # operation.update, operation.publish


async def test_apply_without_publish_writes_drafts_only(
    client: Client, acme: str, database_url: str
) -> None:
    response = await client.post(APPLY, json=crank_file(), headers=auth(acme))
    assert response.status_code == 200, response.text
    assert [(i["action"], i["publish"], i["version"]) for i in response.json()["items"]] == [
        ("create", False, None)
    ] * 3
    assert (await snapshot(database_url))["versions"] == 0

    # Publishing later publishes the unchanged drafts.
    published = await client.post(
        APPLY, params={"publish": "true"}, json=crank_file(), headers=auth(acme)
    )
    assert actions(published.json()) == [
        ("operation", "frankfurter_latest_rate", "unchanged", True),
        ("operation", "delete_order", "unchanged", True),
        ("agent", "currency-rates", "unchanged", True),
    ]


async def test_dry_run_reports_the_plan_and_writes_nothing(
    client: Client, acme: str, database_url: str
) -> None:
    before = await snapshot(database_url)
    dry = await client.post(
        APPLY,
        params={"publish": "true", "dry_run": "true"},
        json=crank_file(),
        headers=auth(acme),
    )
    assert dry.status_code == 200, dry.text
    assert dry.json()["dry_run"] is True
    assert dry.json()["changed"] is True
    assert await snapshot(database_url) == before

    real = await client.post(
        APPLY, params={"publish": "true"}, json=crank_file(), headers=auth(acme)
    )
    assert real.json()["items"] == dry.json()["items"]


async def test_agent_publish_warns_about_bound_operations_without_a_version(
    client: Client, acme: str
) -> None:
    await client.post(APPLY, json=crank_file(agents=[]), headers=auth(acme))
    only_agent = crank_file(operations=[])
    response = await client.post(
        APPLY, params={"publish": "true"}, json=only_agent, headers=auth(acme)
    )
    assert response.status_code == 200, response.text
    (item,) = response.json()["items"]
    assert (item["action"], item["publish"]) == ("create", True)
    assert [w["code"] for w in item["warnings"]] == ["operation_not_published"] * 2


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        pytest.param(
            lambda f: f["operations"][0].update(name="call api!"),
            "operations[0].name",
            id="bad-tool-name",
        ),
        pytest.param(
            lambda f: f["operations"][1].update(safety={"confirmation": False}),
            "operations[1].safety.confirmation",
            id="delete-without-confirmation",
        ),
        pytest.param(
            lambda f: f["agents"][0]["operations"].append("missing_op"),
            "agents[0].operations[2]",
            id="agent-binds-missing-operation",
        ),
        pytest.param(
            lambda f: f["operations"].append(rates_operation()),
            "operations[2].name",
            id="duplicate-operation",
        ),
        pytest.param(
            lambda f: f["operations"][0]["request"].update(url="ftp://example.com/x"),
            "operations[0].request.url",
            id="bad-url",
        ),
        pytest.param(
            lambda f: f["operations"][1]["request"].update(colour="red"),
            "operations[1].request",
            id="unknown-field",
        ),
    ],
)
async def test_file_with_an_error_is_refused_and_nothing_is_written(
    client: Client, acme: str, database_url: str, mutate: Any, field: str
) -> None:
    bad = copy.deepcopy(crank_file())
    mutate(bad)
    before = await snapshot(database_url)
    response = await client.post(APPLY, params={"publish": "true"}, json=bad, headers=auth(acme))
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "validation_failed"
    assert field in [error["field"] for error in body["errors"]]
    assert await snapshot(database_url) == before


async def test_publish_refused_by_a_service_rolls_back_the_whole_apply(
    client: Client, acme: str, database_url: str
) -> None:
    needs_secret = crank_file()
    needs_secret["operations"][1]["request"]["auth"] = {"type": "bearer", "secret": "ORDERS"}
    before = await snapshot(database_url)
    response = await client.post(
        APPLY, params={"publish": "true"}, json=needs_secret, headers=auth(acme)
    )
    assert response.status_code == 400, response.text
    assert [e["field"] for e in response.json()["errors"]] == ["operations[1].request.auth.secret"]
    assert await snapshot(database_url) == before


async def test_file_for_another_workspace_is_refused(client: Client, acme: str) -> None:
    response = await client.post(APPLY, json=crank_file(workspace="other"), headers=auth(acme))
    assert response.status_code == 400
    assert response.json()["code"] == "workspace_mismatch"
    # A file without a workspace goes to the URL's workspace.
    omitted = crank_file()
    del omitted["workspace"]
    assert (await client.post(APPLY, json=omitted, headers=auth(acme))).status_code == 200


async def test_viewer_gets_403_and_other_workspace_token_gets_404(
    client: Client, acme: str, database_url: str
) -> None:
    await client.post("/api/v1/workspaces", json={"slug": "other"}, headers=auth(acme))
    viewer = await make_token(database_url, "viewer", "acme")
    response = await client.post(APPLY, json=crank_file(), headers=auth(viewer))
    assert response.status_code == 403
    assert response.json()["code"] == "forbidden"

    outsider = await make_token(database_url, "owner", "other")
    response = await client.post(APPLY, json=crank_file(), headers=auth(outsider))
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"

    editor = await make_token(database_url, "editor", "acme")
    response = await client.post(APPLY, json=crank_file(), headers=auth(editor))
    assert response.status_code == 200, response.text


async def wait_for_lock_waiter(database_url: str) -> None:
    """Until a backend waits for an advisory lock (bounded: 10 s)."""
    async with await connect(database_url, autocommit=True) as conn:
        for _ in range(200):
            cur = await conn.execute(
                "SELECT count(*) AS n FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"
            )
            row = await cur.fetchone()
            if row is not None and row["n"] > 0:
                return
            await asyncio.sleep(0.05)
    raise AssertionError("the second apply never waited for the first one's lock")


async def test_concurrent_applies_serialize_and_create_each_resource_once(
    client: Client, acme: str, database_url: str
) -> None:
    file = msgspec.convert(crank_file(), CrankFile)
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT id, slug, title FROM workspaces WHERE slug = 'acme'")
        row = await cur.fetchone()
        assert row is not None
        ws = Workspace(id=row["id"], slug=row["slug"], title=row["title"], role=Role.OWNER)

    async with await connect(database_url) as first, await connect(database_url) as second:
        plan = await apply_file(first, ws, "first", file, publish=True, dry_run=False)
        assert plan.changed
        # The second apply blocks on the first's advisory lock until it commits.
        waiting = asyncio.create_task(
            apply_file(second, ws, "second", file, publish=True, dry_run=False)
        )
        await wait_for_lock_waiter(database_url)
        assert not waiting.done()
        await first.commit()
        later = await asyncio.wait_for(waiting, timeout=10)
        await second.commit()
    assert not later.changed
    assert {item.action for item in later.items} == {"unchanged"}
