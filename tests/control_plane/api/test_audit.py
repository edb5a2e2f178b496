from __future__ import annotations

import pytest
from psycopg.types.json import Jsonb

from shared.db import connect
from tests.support.api import Client, auth, make_token

WS = "/api/v1/workspaces/acme"


@pytest.fixture
async def acme(client: Client, admin_token: str) -> None:
    for slug in ("acme", "other"):
        created = await client.post(
            "/api/v1/workspaces", json={"slug": slug}, headers=auth(admin_token)
        )
        assert created.status_code == 201, created.text


async def add_entries(database_url: str, workspace: str, count: int) -> None:
    async with await connect(database_url) as conn:
        for number in range(count):
            await conn.execute(
                """INSERT INTO audit_log (workspace_id, actor, action, resource_type,
                                          resource_name, details)
                   SELECT id, 'tester', 'thing.touch', 'thing', %s, %s
                     FROM workspaces WHERE slug = %s""",
                (f"{workspace}-{number}", Jsonb({"n": number}), workspace),
            )
        await conn.commit()


@pytest.mark.usefixtures("acme")
async def test_audit_log_lists_the_workspaces_changes_newest_first(
    client: Client, admin_token: str
) -> None:
    await client.post(f"{WS}/agents", json={"slug": "rates"}, headers=auth(admin_token))
    await client.put(f"{WS}/secrets/TOKEN", json={"value": "v"}, headers=auth(admin_token))

    response = await client.get(f"{WS}/audit", headers=auth(admin_token))
    assert response.status_code == 200, response.text
    page = response.json()
    assert [(e["action"], e["resource_name"]) for e in page["items"]] == [
        ("secret.create", "TOKEN"),
        ("agent.create", "rates"),
        ("workspace.create", "acme"),
    ]
    assert page["next_cursor"] is None
    entry = page["items"][1]
    assert set(entry) == {
        "id",
        "at",
        "actor",
        "action",
        "resource_type",
        "resource_name",
        "details",
    }
    assert entry["resource_type"] == "agent"
    assert entry["actor"].startswith("test-admin (crk_admin_")


@pytest.mark.usefixtures("acme")
async def test_audit_log_pages_through_every_entry_once_with_the_cursor(
    client: Client, admin_token: str, database_url: str
) -> None:
    await add_entries(database_url, "acme", 7)
    await add_entries(database_url, "other", 3)
    seen: list[int] = []
    sizes: list[int] = []
    cursor: str | None = None
    for _ in range(10):
        query = f"?limit=3&cursor={cursor}" if cursor else "?limit=3"
        response = await client.get(f"{WS}/audit{query}", headers=auth(admin_token))
        assert response.status_code == 200, response.text
        page = response.json()
        seen += [e["id"] for e in page["items"]]
        sizes.append(len(page["items"]))
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert sizes == [3, 3, 2]  # 7 entries plus the workspace's creation
    assert seen == sorted(seen, reverse=True)
    assert len(set(seen)) == 8


@pytest.mark.usefixtures("acme")
async def test_entries_added_while_paging_do_not_shift_later_pages(
    client: Client, admin_token: str, database_url: str
) -> None:
    await add_entries(database_url, "acme", 4)
    first = (await client.get(f"{WS}/audit?limit=2", headers=auth(admin_token))).json()
    await add_entries(database_url, "acme", 2)
    second = await client.get(
        f"{WS}/audit?limit=2&cursor={first['next_cursor']}", headers=auth(admin_token)
    )
    assert [e["resource_name"] for e in second.json()["items"]] == ["acme-1", "acme-0"]


@pytest.mark.usefixtures("acme")
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?limit=0", "limit"),
        ("?limit=201", "limit"),
        ("?cursor=not-a-cursor", "cursor"),
        ("?cursor=YToxMHg", "cursor"),  # base64 of "a:10x"
        ("?cursor=%C3%A9", "cursor"),  # non-ASCII: base64 decoding raises a bare ValueError
    ],
)
async def test_bad_paging_parameters_are_400(
    client: Client, admin_token: str, query: str, field: str
) -> None:
    response = await client.get(f"{WS}/audit{query}", headers=auth(admin_token))
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    assert [e["field"] for e in response.json()["errors"]] == [field]


@pytest.mark.usefixtures("acme")
async def test_a_viewer_may_read_the_audit_log(client: Client, database_url: str) -> None:
    viewer = await make_token(database_url, "viewer", "acme")
    response = await client.get(f"{WS}/audit", headers=auth(viewer))
    assert response.status_code == 200
    assert [e["action"] for e in response.json()["items"]] == ["token.create", "workspace.create"]


@pytest.mark.usefixtures("acme")
async def test_a_token_of_another_workspace_gets_404_on_the_audit_log(
    client: Client, database_url: str
) -> None:
    outsider = await make_token(database_url, "owner", "other")
    response = await client.get(f"{WS}/audit", headers=auth(outsider))
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"
