"""The operations of an apply are written as one batch: the same rows, audit entries and
errors as one service call per operation gave (docs/architecture.md, "Apply in batches")."""

from __future__ import annotations

from typing import Any

from shared.db import connect
from tests.support.api import Client, auth
from tests.support.crank_files import APPLY, crank_file, rates_operation, snapshot


async def audit_rows(database_url: str, after: int = 0) -> list[tuple[str, str, Any]]:
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            """SELECT action, resource_name, details FROM audit_log
                WHERE id > %s AND action LIKE 'operation.%%' ORDER BY id""",
            (after,),
        )
        return [(r["action"], r["resource_name"], r["details"]) for r in await cur.fetchall()]


async def last_audit_id(database_url: str) -> int:
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT coalesce(max(id), 0) AS id FROM audit_log")
        row = await cur.fetchone()
        assert row is not None
        return int(row["id"])


async def test_a_first_apply_audits_each_operation_created_then_published_in_file_order(
    client: Client, acme: str, database_url: str
) -> None:
    response = await client.post(
        APPLY, params={"publish": "true"}, json=crank_file(), headers=auth(acme)
    )
    assert response.status_code == 200, response.text
    assert await audit_rows(database_url) == [
        ("operation.create", "frankfurter_latest_rate", {"revision": 1}),
        ("operation.publish", "frankfurter_latest_rate", {"version": 1, "revision": 1}),
        ("operation.create", "delete_order", {"revision": 1}),
        ("operation.publish", "delete_order", {"version": 1, "revision": 1}),
    ]


async def test_a_changed_operation_gets_the_next_revision_and_version_and_only_it_is_audited(
    client: Client, acme: str, database_url: str
) -> None:
    first = await client.post(
        APPLY, params={"publish": "true"}, json=crank_file(), headers=auth(acme)
    )
    assert first.status_code == 200, first.text
    after = await last_audit_id(database_url)
    changed = crank_file()
    changed["operations"][0] = rates_operation(title="Exchange rate today")
    second = await client.post(APPLY, params={"publish": "true"}, json=changed, headers=auth(acme))
    assert second.status_code == 200, second.text
    items = [(i["name"], i["action"], i["publish"], i["version"]) for i in second.json()["items"]]
    assert items == [
        ("frankfurter_latest_rate", "update", True, 2),
        ("delete_order", "unchanged", False, 1),
        ("currency-rates", "unchanged", False, 1),
    ]
    assert await audit_rows(database_url, after) == [
        ("operation.update", "frankfurter_latest_rate", {"revision": 2}),
        ("operation.publish", "frankfurter_latest_rate", {"version": 2, "revision": 2}),
    ]
    versions = await client.get(
        "/api/v1/workspaces/acme/operations/frankfurter_latest_rate/versions", headers=auth(acme)
    )
    assert versions.status_code == 200, versions.text


async def test_a_draft_applied_without_publish_then_published_by_a_second_apply(
    client: Client, acme: str, database_url: str
) -> None:
    drafts = await client.post(APPLY, json=crank_file(), headers=auth(acme))
    assert drafts.status_code == 200, drafts.text
    assert [i["version"] for i in drafts.json()["items"]] == [None, None, None]
    published = await client.post(
        APPLY, params={"publish": "true"}, json=crank_file(), headers=auth(acme)
    )
    assert published.status_code == 200, published.text
    items = [(i["action"], i["publish"], i["version"]) for i in published.json()["items"]]
    assert items == [("unchanged", True, 1)] * 3
    assert [row[0] for row in await audit_rows(database_url)] == [
        "operation.create",
        "operation.create",
        "operation.publish",
        "operation.publish",
    ]


async def test_every_operation_reading_a_missing_secret_is_named_and_nothing_is_written(
    client: Client, acme: str, database_url: str
) -> None:
    file = crank_file()
    file["operations"][0]["request"]["auth"] = {"type": "bearer", "secret": "RATES"}
    file["operations"][1]["request"]["auth"] = [
        {"type": "header", "name": "X-Key", "secret": "ORDERS"},
    ]
    before = await snapshot(database_url)
    response = await client.post(APPLY, params={"publish": "true"}, json=file, headers=auth(acme))
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "validation_failed"
    assert [e["field"] for e in response.json()["errors"]] == [
        "operations[0].request.auth.secret",
        "operations[1].request.auth[0].secret",
    ]
    assert await snapshot(database_url) == before
