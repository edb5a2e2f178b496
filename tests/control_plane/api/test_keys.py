from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from control_plane.auth import Role, Workspace
from control_plane.errors import Conflict
from control_plane.services.keys import create_api_key
from shared.crypto import KeyHasher
from shared.db import connect
from shared.keys import KeyKind, display_prefix, generate_key, parse_key
from tests.support.api import Client, auth, make_token

WS = "/api/v1/workspaces/acme"
LISTED_FIELDS = {
    "id",
    "prefix",
    "kind",
    "agent",
    "name",
    "created_at",
    "created_by",
    "expires_at",
    "revoked_at",
    "last_used_at",
}


@pytest.fixture
async def acme(client: Client, admin_token: str) -> None:
    for slug in ("acme", "other"):
        created = await client.post(
            "/api/v1/workspaces", json={"slug": slug}, headers=auth(admin_token)
        )
        assert created.status_code == 201, created.text
    for agent in ("rates", "sales"):
        created = await client.post(f"{WS}/agents", json={"slug": agent}, headers=auth(admin_token))
        assert created.status_code == 201, created.text


async def catalog_version(database_url: str) -> int:
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT version FROM catalog_state")
        row = await cur.fetchone()
        assert row is not None
        return int(row["version"])


async def create_key(client: Client, token: str, **body: object) -> dict[str, object]:
    response = await client.post(f"{WS}/keys", json={"agent": "rates", **body}, headers=auth(token))
    assert response.status_code == 201, response.text
    issued: dict[str, object] = response.json()
    return issued


@pytest.mark.usefixtures("acme")
async def test_created_key_is_returned_once_and_stored_only_as_an_hmac(
    client: Client, admin_token: str, database_url: str, hasher: KeyHasher
) -> None:
    issued = await create_key(client, admin_token, name="laptop")
    key = issued["key"]
    assert isinstance(key, str)
    assert parse_key(key) is KeyKind.AGENT
    assert issued["prefix"] == display_prefix(key)
    assert (issued["kind"], issued["agent"], issued["name"]) == ("agent", "rates", "laptop")

    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT * FROM api_keys WHERE id = %s", (issued["id"],))
        row = await cur.fetchone()
        assert row is not None
        assert row["hash"] == hasher.hash(key)
        assert all(key not in str(value) for value in row.values())
        assert key.encode() not in bytes(row["hash"])
        cur = await conn.execute("SELECT details::text AS details, resource_name FROM audit_log")
        assert all(key not in str(value) for r in await cur.fetchall() for value in r.values())

    listed = await client.get(f"{WS}/keys", headers=auth(admin_token))
    assert key not in listed.text
    assert [set(item) for item in listed.json()["items"]] == [LISTED_FIELDS]


@pytest.mark.usefixtures("acme")
async def test_approval_key_has_its_own_kind(client: Client, admin_token: str) -> None:
    issued = await create_key(client, admin_token, kind="approval")
    assert issued["kind"] == "approval"
    assert isinstance(issued["key"], str)
    assert parse_key(issued["key"]) is KeyKind.APPROVAL


@pytest.mark.usefixtures("acme")
async def test_key_list_can_be_narrowed_to_one_agent(client: Client, admin_token: str) -> None:
    await create_key(client, admin_token)
    sales = await client.post(f"{WS}/keys", json={"agent": "sales"}, headers=auth(admin_token))
    assert sales.status_code == 201
    everything = await client.get(f"{WS}/keys", headers=auth(admin_token))
    assert [k["agent"] for k in everything.json()["items"]] == ["rates", "sales"]
    only_sales = await client.get(f"{WS}/keys?agent=sales", headers=auth(admin_token))
    assert [k["agent"] for k in only_sales.json()["items"]] == ["sales"]


@pytest.mark.usefixtures("acme")
async def test_key_with_a_future_expiry_keeps_it(client: Client, admin_token: str) -> None:
    expires = datetime.now(UTC) + timedelta(days=30)
    issued = await create_key(client, admin_token, expires_at=expires.isoformat())
    assert isinstance(issued["expires_at"], str)
    assert datetime.fromisoformat(issued["expires_at"]) == expires


@pytest.mark.usefixtures("acme")
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"agent": "ghost"}, "agent"),
        ({"agent": "rates", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ],
)
async def test_key_create_refuses_bad_input_with_a_field_error(
    client: Client, admin_token: str, body: dict[str, str], field: str
) -> None:
    response = await client.post(f"{WS}/keys", json=body, headers=auth(admin_token))
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    assert [e["field"] for e in response.json()["errors"]] == [field]


@pytest.mark.usefixtures("acme")
@pytest.mark.parametrize(
    "body",
    [
        {"agent": "rates", "kind": "admin"},
        {"agent": "rates", "expires_at": "2999-01-01T00:00:00"},  # no timezone
        {"agent": "rates", "key": "crk_agent_chosen"},  # the API never takes a chosen key
    ],
)
async def test_key_create_refuses_malformed_bodies(
    client: Client, admin_token: str, body: dict[str, str]
) -> None:
    response = await client.post(f"{WS}/keys", json=body, headers=auth(admin_token))
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"


@pytest.mark.usefixtures("acme")
async def test_key_create_and_revoke_bump_the_catalog_and_are_audited(
    client: Client, admin_token: str, database_url: str
) -> None:
    start = await catalog_version(database_url)
    issued = await create_key(client, admin_token)
    after_create = await catalog_version(database_url)
    assert after_create > start

    revoked = await client.delete(f"{WS}/keys/{issued['id']}", headers=auth(admin_token))
    assert revoked.status_code == 200, revoked.text
    assert revoked.json()["revoked_at"] is not None
    assert await catalog_version(database_url) > after_create

    async with await connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT action, resource_name, details FROM audit_log "
            "WHERE resource_type = 'api_key' ORDER BY id"
        )
        rows = await cur.fetchall()
    assert [r["action"] for r in rows] == ["key.create", "key.revoke"]
    for row in rows:
        assert row["resource_name"] == issued["prefix"]
        assert row["details"]["agent"] == "rates"
        assert row["details"]["kind"] == "agent"


@pytest.mark.usefixtures("acme")
async def test_revoking_a_revoked_key_succeeds_and_changes_nothing(
    client: Client, admin_token: str, database_url: str
) -> None:
    issued = await create_key(client, admin_token)
    first = await client.delete(f"{WS}/keys/{issued['id']}", headers=auth(admin_token))
    version = await catalog_version(database_url)

    second = await client.delete(f"{WS}/keys/{issued['id']}", headers=auth(admin_token))
    assert second.status_code == 200
    assert second.json()["revoked_at"] == first.json()["revoked_at"]
    assert await catalog_version(database_url) == version
    listed = await client.get(f"{WS}/keys", headers=auth(admin_token))
    assert listed.json()["items"][0]["revoked_at"] == first.json()["revoked_at"]


@pytest.mark.usefixtures("acme")
async def test_revoking_an_unknown_key_or_one_of_another_workspace_is_404(
    client: Client, admin_token: str, database_url: str
) -> None:
    await client.post(
        "/api/v1/workspaces/other/agents", json={"slug": "theirs"}, headers=auth(admin_token)
    )
    theirs = await client.post(
        "/api/v1/workspaces/other/keys", json={"agent": "theirs"}, headers=auth(admin_token)
    )
    assert theirs.status_code == 201
    for key_id in (999999, theirs.json()["id"]):
        response = await client.delete(f"{WS}/keys/{key_id}", headers=auth(admin_token))
        assert response.status_code == 404
        assert response.json()["code"] == "not_found"


@pytest.mark.usefixtures("acme")
async def test_editor_cannot_create_or_revoke_keys_but_viewer_can_list_them(
    client: Client, admin_token: str, database_url: str
) -> None:
    issued = await create_key(client, admin_token)
    editor = await make_token(database_url, "editor", "acme")
    created = await client.post(f"{WS}/keys", json={"agent": "rates"}, headers=auth(editor))
    revoked = await client.delete(f"{WS}/keys/{issued['id']}", headers=auth(editor))
    assert (created.status_code, revoked.status_code) == (403, 403)
    assert {created.json()["code"], revoked.json()["code"]} == {"forbidden"}

    viewer = await make_token(database_url, "viewer", "acme")
    listed = await client.get(f"{WS}/keys", headers=auth(viewer))
    assert listed.status_code == 200
    assert [k["id"] for k in listed.json()["items"]] == [issued["id"]]

    owner = await make_token(database_url, "owner", "acme")
    me = (await client.get("/api/v1/me", headers=auth(owner))).json()
    issued_by_owner = await create_key(client, owner)
    assert issued_by_owner["created_by"] == f"test-owner ({me['token_prefix']})"


@pytest.mark.usefixtures("acme")
async def test_a_token_of_another_workspace_gets_404_on_every_key_route(
    client: Client, admin_token: str, database_url: str
) -> None:
    issued = await create_key(client, admin_token)
    outsider = await make_token(database_url, "owner", "other")
    responses = [
        await client.get(f"{WS}/keys", headers=auth(outsider)),
        await client.post(f"{WS}/keys", json={"agent": "rates"}, headers=auth(outsider)),
        await client.delete(f"{WS}/keys/{issued['id']}", headers=auth(outsider)),
    ]
    assert [r.status_code for r in responses] == [404] * 3
    assert {r.json()["code"] for r in responses} == {"not_found"}


@pytest.mark.usefixtures("acme")
async def test_a_saved_key_can_be_registered_again_but_only_once(
    database_url: str, hasher: KeyHasher
) -> None:
    saved = generate_key(KeyKind.AGENT)
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT id, slug, title FROM workspaces WHERE slug = 'acme'")
        row = await cur.fetchone()
        assert row is not None
        ws = Workspace(id=row["id"], slug=row["slug"], title=row["title"], role=Role.OWNER)
        issued = await create_api_key(conn, hasher, ws, "cli", agent="rates", key=saved)
        assert issued.key == saved
        assert issued.prefix == display_prefix(saved)
        with pytest.raises(Conflict) as raised:
            await create_api_key(conn, hasher, ws, "cli", agent="rates", key=saved)
        assert raised.value.code == "already_exists"
