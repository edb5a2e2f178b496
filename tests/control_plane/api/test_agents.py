from __future__ import annotations

from typing import Any

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


async def insert_operation(
    database_url: str, name: str, *, published: bool = False, workspace: str = "acme"
) -> None:
    """An operation row as the operations API would leave it (never published,
    or published once)."""
    draft = {
        "name": name,
        "description": f"Gets {name}. Use when asked.",
        "input": {"type": "object", "properties": {}},
        "request": {"method": "GET", "url": "https://example.com/x"},
    }
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            """INSERT INTO operations (workspace_id, name, draft)
               SELECT id, %s, %s FROM workspaces WHERE slug = %s RETURNING id""",
            (name, Jsonb(draft), workspace),
        )
        row = await cur.fetchone()
        assert row is not None
        if published:
            await conn.execute(
                """INSERT INTO operation_versions (operation_id, version, spec, published_by)
                   VALUES (%s, 1, %s, 'test')""",
                (row["id"], Jsonb(draft)),
            )
            await conn.execute(
                "UPDATE operations SET latest_version = 1 WHERE id = %s", (row["id"],)
            )
        await conn.commit()


async def catalog_version(database_url: str) -> int:
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT version FROM catalog_state")
        row = await cur.fetchone()
        assert row is not None
        return int(row["version"])


async def audit_actions(database_url: str) -> list[str]:
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT action FROM audit_log WHERE resource_type = 'agent' ORDER BY id"
        )
        return [row["action"] for row in await cur.fetchall()]


def agent_body(slug: str = "rates", operations: list[str] | None = None, **extra: Any) -> Any:
    return {"slug": slug, "title": "Rates", "operations": operations or [], **extra}


async def create(client: Client, token: str, body: Any) -> str:
    response = await client.post(f"{WS}/agents", json=body, headers=auth(token))
    assert response.status_code == 201, response.text
    return response.headers["etag"]


@pytest.mark.usefixtures("acme")
async def test_editor_creates_agent_and_reads_it_back_with_etag(
    client: Client, database_url: str
) -> None:
    await insert_operation(database_url, "latest_rate")
    editor = await make_token(database_url, "editor", "acme")
    body = agent_body(operations=["latest_rate"], rate_limit={"requests": 5, "per_seconds": 60})
    created = await client.post(f"{WS}/agents", json=body, headers=auth(editor))
    assert created.status_code == 201, created.text
    assert created.headers["etag"] == '"1.r1"'

    read = await client.get(f"{WS}/agents/rates", headers=auth(editor))
    assert read.status_code == 200
    assert read.headers["etag"] == '"1.r1"'
    agent = read.json()
    assert agent["draft"] == {
        "slug": "rates",
        "title": "Rates",
        "description": "",
        "operations": ["latest_rate"],
        "rate_limit": {"requests": 5, "per_seconds": 60},
        "confirmation_mode": "auto",
        "approval_wait_s": None,
        "auth": {"providers": [], "agent_keys": True, "scopes": []},  # the API shows defaults
    }
    assert agent["revision"] == 1
    assert agent["published"] is None
    assert agent["published_version"] == 0
    assert agent["published_at"] is None


@pytest.mark.usefixtures("acme")
async def test_list_shows_each_agent_with_its_published_flag(
    client: Client, admin_token: str
) -> None:
    await create(client, admin_token, agent_body("alpha"))
    etag = await create(client, admin_token, agent_body("beta"))
    published = await client.post(f"{WS}/agents/beta/publish", headers=auth(admin_token, etag))
    assert published.status_code == 200, published.text

    listed = await client.get(f"{WS}/agents", headers=auth(admin_token))
    assert listed.status_code == 200
    items = listed.json()["items"]
    assert [(a["slug"], a["published"], a["published_version"]) for a in items] == [
        ("alpha", False, 0),
        ("beta", True, 1),
    ]
    assert set(items[0]) == {
        "slug",
        "title",
        "revision",
        "published",
        "published_version",
        "updated_at",
    }


@pytest.mark.usefixtures("acme")
async def test_creating_an_agent_twice_is_409_already_exists(
    client: Client, admin_token: str
) -> None:
    await create(client, admin_token, agent_body())
    again = await client.post(f"{WS}/agents", json=agent_body(), headers=auth(admin_token))
    assert again.status_code == 409
    assert again.json()["code"] == "already_exists"


@pytest.mark.usefixtures("acme")
async def test_invalid_agent_is_400_with_every_field_error(
    client: Client, admin_token: str
) -> None:
    body = agent_body("Not A Slug", rate_limit={"requests": 0, "per_seconds": 60})
    response = await client.post(f"{WS}/agents", json=body, headers=auth(admin_token))
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    assert {e["field"] for e in response.json()["errors"]} == {"slug", "rate_limit.requests"}


@pytest.mark.usefixtures("acme")
async def test_binding_an_unknown_operation_is_a_field_error_on_its_index(
    client: Client, admin_token: str, database_url: str
) -> None:
    await insert_operation(database_url, "known")
    await insert_operation(database_url, "elsewhere", workspace="other")
    body = agent_body(operations=["known", "missing", "elsewhere"])
    response = await client.post(f"{WS}/agents", json=body, headers=auth(admin_token))
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    assert [e["field"] for e in response.json()["errors"]] == ["operations[1]", "operations[2]"]


@pytest.mark.usefixtures("acme")
async def test_unknown_field_in_agent_body_is_rejected(client: Client, admin_token: str) -> None:
    body = agent_body(colour="red")
    response = await client.post(f"{WS}/agents", json=body, headers=auth(admin_token))
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    # A near miss names the field meant, from the body's own fields.
    typo = agent_body(descripton="Looks up rates.")
    response = await client.post(f"{WS}/agents", json=typo, headers=auth(admin_token))
    assert response.status_code == 400
    [error] = response.json()["errors"]
    assert error == {
        "field": "",
        "message": "Object contains unknown field `descripton`; did you mean `description`?",
    }


@pytest.mark.usefixtures("acme")
async def test_replacing_the_draft_bumps_the_revision(
    client: Client, admin_token: str, database_url: str
) -> None:
    await insert_operation(database_url, "latest_rate")
    etag = await create(client, admin_token, agent_body())
    body = agent_body(operations=["latest_rate"], description="Looks up rates.")
    updated = await client.put(f"{WS}/agents/rates", json=body, headers=auth(admin_token, etag))
    assert updated.status_code == 200, updated.text
    assert updated.headers["etag"] == '"1.r2"'
    assert updated.json()["draft"]["operations"] == ["latest_rate"]
    assert updated.json()["draft"]["description"] == "Looks up rates."


@pytest.mark.usefixtures("acme")
async def test_replacing_the_draft_with_the_same_content_keeps_the_revision(
    client: Client, admin_token: str, database_url: str
) -> None:
    etag = await create(client, admin_token, agent_body())
    same = await client.put(
        f"{WS}/agents/rates", json=agent_body(), headers=auth(admin_token, etag)
    )
    assert same.status_code == 200
    assert same.headers["etag"] == etag
    assert await audit_actions(database_url) == ["agent.create"]


@pytest.mark.usefixtures("acme")
async def test_writes_without_if_match_are_428(client: Client, admin_token: str) -> None:
    await create(client, admin_token, agent_body())
    headers = auth(admin_token)
    responses = [
        await client.put(f"{WS}/agents/rates", json=agent_body(), headers=headers),
        await client.post(f"{WS}/agents/rates/publish", headers=headers),
        await client.post(f"{WS}/agents/rates/unpublish", headers=headers),
        await client.delete(f"{WS}/agents/rates", headers=headers),
    ]
    assert [r.status_code for r in responses] == [428] * 4
    assert {r.json()["code"] for r in responses} == {"if_match_required"}


@pytest.mark.usefixtures("acme")
async def test_writes_with_a_stale_etag_are_409_stale_revision(
    client: Client, admin_token: str
) -> None:
    stale = await create(client, admin_token, agent_body())
    first = await client.put(
        f"{WS}/agents/rates", json=agent_body(title="New"), headers=auth(admin_token, stale)
    )
    assert first.status_code == 200
    headers = auth(admin_token, stale)
    responses = [
        await client.put(f"{WS}/agents/rates", json=agent_body(title="Lost"), headers=headers),
        await client.post(f"{WS}/agents/rates/publish", headers=headers),
        await client.post(f"{WS}/agents/rates/unpublish", headers=headers),
        await client.delete(f"{WS}/agents/rates", headers=headers),
    ]
    assert [r.status_code for r in responses] == [409] * 4
    assert {r.json()["code"] for r in responses} == {"stale_revision"}
    read = await client.get(f"{WS}/agents/rates", headers=auth(admin_token))
    assert read.json()["draft"]["title"] == "New"


@pytest.mark.usefixtures("acme")
async def test_slug_in_body_must_match_the_url(client: Client, admin_token: str) -> None:
    etag = await create(client, admin_token, agent_body())
    response = await client.put(
        f"{WS}/agents/rates", json=agent_body("renamed"), headers=auth(admin_token, etag)
    )
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    assert [e["field"] for e in response.json()["errors"]] == ["slug"]


@pytest.mark.usefixtures("acme")
async def test_publish_copies_the_draft_and_bumps_the_catalog(
    client: Client, admin_token: str, database_url: str
) -> None:
    await insert_operation(database_url, "latest_rate", published=True)
    etag = await create(client, admin_token, agent_body(operations=["latest_rate"]))
    before = await catalog_version(database_url)

    published = await client.post(f"{WS}/agents/rates/publish", headers=auth(admin_token, etag))
    assert published.status_code == 200, published.text
    outcome = published.json()
    assert outcome["changed"] is True
    assert outcome["published_version"] == 1
    assert outcome["warnings"] == []
    assert outcome["agent"]["published"] == {
        "title": "Rates",
        "description": "",
        "operations": ["latest_rate"],
        "rate_limit": None,
        "confirmation_mode": "auto",
        "approval_wait_s": None,
        "auth": {"providers": [], "agent_keys": True, "scopes": []},  # the API shows defaults
    }
    assert outcome["agent"]["published_at"] is not None
    assert published.headers["etag"] == etag  # the draft did not change
    assert await catalog_version(database_url) > before
    assert await audit_actions(database_url) == ["agent.create", "agent.publish"]


@pytest.mark.usefixtures("acme")
async def test_publish_with_an_unpublished_operation_succeeds_and_warns(
    client: Client, admin_token: str, database_url: str
) -> None:
    await insert_operation(database_url, "ready", published=True)
    await insert_operation(database_url, "draft_only")
    etag = await create(client, admin_token, agent_body(operations=["ready", "draft_only"]))

    published = await client.post(f"{WS}/agents/rates/publish", headers=auth(admin_token, etag))
    assert published.status_code == 200, published.text
    outcome = published.json()
    assert outcome["changed"] is True
    assert [(w["code"], w["operation"]) for w in outcome["warnings"]] == [
        ("operation_not_published", "draft_only")
    ]
    # The name stays bound, so the operation joins the catalog once it is published.
    assert outcome["agent"]["published"]["operations"] == ["ready", "draft_only"]


@pytest.mark.usefixtures("acme")
async def test_publishing_an_unchanged_draft_makes_no_new_version(
    client: Client, admin_token: str, database_url: str
) -> None:
    etag = await create(client, admin_token, agent_body())
    first = await client.post(f"{WS}/agents/rates/publish", headers=auth(admin_token, etag))
    assert first.json()["published_version"] == 1
    version = await catalog_version(database_url)

    second = await client.post(f"{WS}/agents/rates/publish", headers=auth(admin_token, etag))
    assert second.status_code == 200
    assert second.json()["changed"] is False
    assert second.json()["published_version"] == 1
    assert await catalog_version(database_url) == version
    assert await audit_actions(database_url) == ["agent.create", "agent.publish"]


@pytest.mark.usefixtures("acme")
async def test_draft_edits_reach_the_published_state_only_on_the_next_publish(
    client: Client, admin_token: str
) -> None:
    etag = await create(client, admin_token, agent_body())
    await client.post(f"{WS}/agents/rates/publish", headers=auth(admin_token, etag))
    edited = await client.put(
        f"{WS}/agents/rates", json=agent_body(title="Renamed"), headers=auth(admin_token, etag)
    )
    assert edited.json()["published"]["title"] == "Rates"

    again = await client.post(
        f"{WS}/agents/rates/publish", headers=auth(admin_token, edited.headers["etag"])
    )
    assert again.json()["changed"] is True
    assert again.json()["published_version"] == 2
    assert again.json()["agent"]["published"]["title"] == "Renamed"


@pytest.mark.usefixtures("acme")
async def test_unpublish_clears_the_published_state_and_bumps_the_catalog(
    client: Client, admin_token: str, database_url: str
) -> None:
    etag = await create(client, admin_token, agent_body())
    await client.post(f"{WS}/agents/rates/publish", headers=auth(admin_token, etag))
    before = await catalog_version(database_url)

    response = await client.post(f"{WS}/agents/rates/unpublish", headers=auth(admin_token, etag))
    assert response.status_code == 200, response.text
    assert response.json()["published"] is None
    assert response.json()["published_version"] == 1  # version numbers are never reused
    assert await catalog_version(database_url) > before
    assert await audit_actions(database_url) == [
        "agent.create",
        "agent.publish",
        "agent.unpublish",
    ]

    republished = await client.post(f"{WS}/agents/rates/publish", headers=auth(admin_token, etag))
    assert republished.json()["published_version"] == 2


@pytest.mark.usefixtures("acme")
async def test_delete_removes_the_agent_and_its_keys_and_bumps_the_catalog(
    client: Client, admin_token: str, database_url: str
) -> None:
    etag = await create(client, admin_token, agent_body())
    key = await client.post(f"{WS}/keys", json={"agent": "rates"}, headers=auth(admin_token))
    assert key.status_code == 201, key.text
    before = await catalog_version(database_url)

    deleted = await client.delete(f"{WS}/agents/rates", headers=auth(admin_token, etag))
    assert deleted.status_code == 204
    assert (await client.get(f"{WS}/agents/rates", headers=auth(admin_token))).status_code == 404
    keys = await client.get(f"{WS}/keys", headers=auth(admin_token))
    assert keys.json()["items"] == []
    assert await catalog_version(database_url) > before
    assert (await audit_actions(database_url))[-1] == "agent.delete"


@pytest.mark.usefixtures("acme")
async def test_editor_cannot_delete_an_agent_because_that_deletes_its_keys(
    client: Client, admin_token: str, database_url: str
) -> None:
    etag = await create(client, admin_token, agent_body())
    key = await client.post(f"{WS}/keys", json={"agent": "rates"}, headers=auth(admin_token))
    assert key.status_code == 201, key.text
    editor = await make_token(database_url, "editor", "acme")
    before = await catalog_version(database_url)

    refused = await client.delete(f"{WS}/agents/rates", headers=auth(editor, etag))
    assert refused.status_code == 403
    assert refused.json()["code"] == "forbidden"
    assert (await client.get(f"{WS}/agents/rates", headers=auth(editor))).status_code == 200
    keys = await client.get(f"{WS}/keys", headers=auth(editor))
    assert [k["prefix"] for k in keys.json()["items"]] == [key.json()["prefix"]]
    assert await catalog_version(database_url) == before

    owner = await make_token(database_url, "owner", "acme")
    deleted = await client.delete(f"{WS}/agents/rates", headers=auth(owner, etag))
    assert deleted.status_code == 204


@pytest.mark.usefixtures("acme")
async def test_deleting_an_unpublished_agent_without_keys_does_not_bump_the_catalog(
    client: Client, admin_token: str, database_url: str
) -> None:
    etag = await create(client, admin_token, agent_body())
    before = await catalog_version(database_url)
    deleted = await client.delete(f"{WS}/agents/rates", headers=auth(admin_token, etag))
    assert deleted.status_code == 204
    assert await catalog_version(database_url) == before
    assert (await audit_actions(database_url))[-1] == "agent.delete"


@pytest.mark.usefixtures("acme")
async def test_an_etag_of_a_deleted_agent_does_not_match_the_agent_created_again(
    client: Client, admin_token: str
) -> None:
    old = await create(client, admin_token, agent_body())
    deleted = await client.delete(f"{WS}/agents/rates", headers=auth(admin_token, old))
    assert deleted.status_code == 204
    new = await create(client, admin_token, agent_body(title="Again"))
    assert new != old  # both are revision 1 of an agent called "rates"
    headers = auth(admin_token, old)
    responses = [
        await client.put(f"{WS}/agents/rates", json=agent_body(title="Stale"), headers=headers),
        await client.post(f"{WS}/agents/rates/publish", headers=headers),
        await client.delete(f"{WS}/agents/rates", headers=headers),
    ]
    assert [r.status_code for r in responses] == [409] * 3
    assert {r.json()["code"] for r in responses} == {"stale_revision"}
    read = await client.get(f"{WS}/agents/rates", headers=auth(admin_token))
    assert read.json()["draft"]["title"] == "Again"
    assert read.json()["published"] is None


@pytest.mark.usefixtures("acme")
async def test_an_if_match_that_crank_did_not_issue_is_428(
    client: Client, admin_token: str
) -> None:
    await create(client, admin_token, agent_body())
    for value in ('"r1"', "1.r1", '"1.r"', '"x.r1"', '"1.r1"junk', '"' + "9" * 40 + '.r1"'):
        response = await client.put(
            f"{WS}/agents/rates", json=agent_body(), headers=auth(admin_token, value)
        )
        assert (response.status_code, response.json()["code"]) == (428, "if_match_required")


@pytest.mark.usefixtures("acme")
async def test_an_unknown_agent_is_404_on_every_route(client: Client, admin_token: str) -> None:
    headers = auth(admin_token, '"1.r1"')
    responses = [
        await client.get(f"{WS}/agents/ghost", headers=headers),
        await client.put(f"{WS}/agents/ghost", json=agent_body("ghost"), headers=headers),
        await client.post(f"{WS}/agents/ghost/publish", headers=headers),
        await client.post(f"{WS}/agents/ghost/unpublish", headers=headers),
        await client.delete(f"{WS}/agents/ghost", headers=headers),
    ]
    assert [r.status_code for r in responses] == [404] * 5
    assert {r.json()["code"] for r in responses} == {"not_found"}


@pytest.mark.usefixtures("acme")
async def test_viewer_reads_agents_but_cannot_change_them(
    client: Client, admin_token: str, database_url: str
) -> None:
    etag = await create(client, admin_token, agent_body())
    viewer = await make_token(database_url, "viewer", "acme")
    assert (await client.get(f"{WS}/agents", headers=auth(viewer))).status_code == 200
    assert (await client.get(f"{WS}/agents/rates", headers=auth(viewer))).status_code == 200
    headers = auth(viewer, etag)
    responses = [
        await client.post(f"{WS}/agents", json=agent_body("new"), headers=headers),
        await client.put(f"{WS}/agents/rates", json=agent_body(), headers=headers),
        await client.post(f"{WS}/agents/rates/publish", headers=headers),
        await client.post(f"{WS}/agents/rates/unpublish", headers=headers),
        await client.delete(f"{WS}/agents/rates", headers=headers),
    ]
    assert [r.status_code for r in responses] == [403] * 5
    assert {r.json()["code"] for r in responses} == {"forbidden"}


@pytest.mark.usefixtures("acme")
async def test_a_token_of_another_workspace_gets_404_on_every_agent_route(
    client: Client, admin_token: str, database_url: str
) -> None:
    etag = await create(client, admin_token, agent_body())
    outsider = await make_token(database_url, "owner", "other")
    headers = auth(outsider, etag)
    responses = [
        await client.get(f"{WS}/agents", headers=headers),
        await client.post(f"{WS}/agents", json=agent_body("new"), headers=headers),
        await client.get(f"{WS}/agents/rates", headers=headers),
        await client.put(f"{WS}/agents/rates", json=agent_body(), headers=headers),
        await client.post(f"{WS}/agents/rates/publish", headers=headers),
        await client.post(f"{WS}/agents/rates/unpublish", headers=headers),
        await client.delete(f"{WS}/agents/rates", headers=headers),
    ]
    assert [r.status_code for r in responses] == [404] * 7
    assert {r.json()["code"] for r in responses} == {"not_found"}
