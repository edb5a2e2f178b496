from __future__ import annotations

from datetime import datetime

import pytest

from shared.crypto import Sealed, SecretBox, secret_associated_data
from shared.db import connect
from tests.support.api import Client, auth, make_token
from tests.support.db import TEST_SECRET_KEY

WS = "/api/v1/workspaces/acme"
VALUE = "sk_live_0123456789abcdefSECRET"


@pytest.fixture
async def acme(client: Client, admin_token: str) -> None:
    for slug in ("acme", "other"):
        created = await client.post(
            "/api/v1/workspaces", json={"slug": slug}, headers=auth(admin_token)
        )
        assert created.status_code == 201, created.text


async def catalog_version(database_url: str) -> int:
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT version FROM catalog_state")
        row = await cur.fetchone()
        assert row is not None
        return int(row["version"])


@pytest.mark.usefixtures("acme")
async def test_put_creates_a_secret_with_201_and_replaces_it_with_200(
    client: Client, admin_token: str
) -> None:
    created = await client.put(
        f"{WS}/secrets/STRIPE_KEY", json={"value": VALUE}, headers=auth(admin_token)
    )
    assert created.status_code == 201, created.text
    assert set(created.json()) == {"name", "created_at", "updated_at"}

    replaced = await client.put(
        f"{WS}/secrets/STRIPE_KEY", json={"value": "other"}, headers=auth(admin_token)
    )
    assert replaced.status_code == 200
    assert replaced.json()["created_at"] == created.json()["created_at"]
    updated = datetime.fromisoformat(replaced.json()["updated_at"])
    assert updated > datetime.fromisoformat(created.json()["updated_at"])


@pytest.mark.usefixtures("acme")
async def test_setting_the_value_a_secret_already_holds_changes_nothing(
    client: Client, admin_token: str, database_url: str
) -> None:
    created = await client.put(
        f"{WS}/secrets/STRIPE_KEY", json={"value": VALUE}, headers=auth(admin_token)
    )
    assert created.status_code == 201, created.text
    before = await catalog_version(database_url)
    same = await client.put(
        f"{WS}/secrets/STRIPE_KEY", json={"value": VALUE}, headers=auth(admin_token)
    )
    assert same.status_code == 200, same.text
    assert same.json() == created.json()  # updated_at did not move
    assert await catalog_version(database_url) == before
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT action FROM audit_log WHERE resource_type = 'secret' ORDER BY id"
        )
        assert [row["action"] for row in await cur.fetchall()] == ["secret.create"]

    changed = await client.put(
        f"{WS}/secrets/STRIPE_KEY", json={"value": "new"}, headers=auth(admin_token)
    )
    assert changed.status_code == 200
    assert await catalog_version(database_url) == before + 1


@pytest.mark.usefixtures("acme")
async def test_setting_the_same_value_sealed_with_a_previous_key_reseals_it(
    client: Client, admin_token: str, database_url: str
) -> None:
    old_box = SecretBox("an-older-secret-key-that-is-long-enough-987654")
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT id FROM workspaces WHERE slug = 'acme'")
        ws = await cur.fetchone()
        assert ws is not None
        sealed = old_box.seal(VALUE, secret_associated_data(ws["id"], "STRIPE_KEY"))
        await conn.execute(
            """INSERT INTO secrets (workspace_id, name, ciphertext, nonce, key_id)
               VALUES (%s, 'STRIPE_KEY', %s, %s, %s)""",
            (ws["id"], sealed.ciphertext, sealed.nonce, sealed.key_id),
        )
        await conn.commit()
    before = await catalog_version(database_url)
    response = await client.put(
        f"{WS}/secrets/STRIPE_KEY", json={"value": VALUE}, headers=auth(admin_token)
    )
    assert response.status_code == 200, response.text
    assert await catalog_version(database_url) == before + 1
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT key_id FROM secrets WHERE name = 'STRIPE_KEY'")
        row = await cur.fetchone()
    assert row == {"key_id": SecretBox(TEST_SECRET_KEY).current_key_id}


@pytest.mark.usefixtures("acme")
async def test_the_stored_secret_is_ciphertext_that_opens_with_the_secret_box(
    client: Client, admin_token: str, database_url: str
) -> None:
    await client.put(f"{WS}/secrets/STRIPE_KEY", json={"value": VALUE}, headers=auth(admin_token))
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            """SELECT s.*, s::text AS whole FROM secrets s
                JOIN workspaces w ON w.id = s.workspace_id WHERE w.slug = 'acme'"""
        )
        row = await cur.fetchone()
    assert row is not None
    assert VALUE.encode() not in bytes(row["ciphertext"])
    assert VALUE not in row["whole"]
    sealed = Sealed(bytes(row["ciphertext"]), bytes(row["nonce"]), row["key_id"])
    box = SecretBox(TEST_SECRET_KEY)
    associated = secret_associated_data(row["workspace_id"], "STRIPE_KEY")
    assert box.open(sealed, associated) == VALUE


@pytest.mark.usefixtures("acme")
async def test_secret_values_appear_in_no_response_and_no_audit_row(
    client: Client, admin_token: str, database_url: str
) -> None:
    headers = auth(admin_token)
    responses = [
        await client.put(f"{WS}/secrets/STRIPE_KEY", json={"value": VALUE}, headers=headers),
        await client.put(f"{WS}/secrets/STRIPE_KEY", json={"value": f"{VALUE}-2"}, headers=headers),
        await client.get(f"{WS}/secrets", headers=headers),
        await client.get(f"{WS}/audit", headers=headers),
        await client.delete(f"{WS}/secrets/STRIPE_KEY", headers=headers),
        await client.get(f"{WS}/audit", headers=headers),
    ]
    assert [r.status_code for r in responses] == [201, 200, 200, 200, 204, 200]
    assert all(VALUE not in r.text for r in responses)
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT a::text AS whole, action FROM audit_log a ORDER BY id")
        rows = await cur.fetchall()
    assert [r["action"] for r in rows if r["action"].startswith("secret.")] == [
        "secret.create",
        "secret.update",
        "secret.delete",
    ]
    assert all(VALUE not in r["whole"] for r in rows)


@pytest.mark.usefixtures("acme")
async def test_secret_list_shows_names_and_times_only(client: Client, admin_token: str) -> None:
    for name in ("b.token", "A_KEY"):
        await client.put(f"{WS}/secrets/{name}", json={"value": VALUE}, headers=auth(admin_token))
    listed = await client.get(f"{WS}/secrets", headers=auth(admin_token))
    assert listed.status_code == 200
    items = listed.json()["items"]
    assert [s["name"] for s in items] == ["A_KEY", "b.token"]
    assert all(set(s) == {"name", "created_at", "updated_at"} for s in items)


@pytest.mark.usefixtures("acme")
async def test_set_and_delete_bump_the_catalog(
    client: Client, admin_token: str, database_url: str
) -> None:
    start = await catalog_version(database_url)
    await client.put(f"{WS}/secrets/TOKEN", json={"value": VALUE}, headers=auth(admin_token))
    after_create = await catalog_version(database_url)
    await client.put(f"{WS}/secrets/TOKEN", json={"value": "new"}, headers=auth(admin_token))
    after_replace = await catalog_version(database_url)
    deleted = await client.delete(f"{WS}/secrets/TOKEN", headers=auth(admin_token))
    assert deleted.status_code == 204
    assert start < after_create < after_replace < await catalog_version(database_url)


@pytest.mark.usefixtures("acme")
async def test_deleting_a_missing_secret_is_404(client: Client, admin_token: str) -> None:
    response = await client.delete(f"{WS}/secrets/NOPE", headers=auth(admin_token))
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


@pytest.mark.usefixtures("acme")
@pytest.mark.parametrize(
    ("name", "body", "field"),
    [
        ("bad!name", {"value": VALUE}, "name"),
        ("x" * 129, {"value": VALUE}, "name"),
        ("EMPTY", {"value": ""}, "value"),
        ("HUGE", {"value": "x" * (64 * 1024 + 1)}, "value"),
        ("WIDE", {"value": "é" * (32 * 1024 + 1)}, "value"),  # the limit counts UTF-8 bytes
    ],
)
async def test_invalid_secret_is_400_with_a_field_error(
    client: Client, admin_token: str, name: str, body: dict[str, str], field: str
) -> None:
    response = await client.put(f"{WS}/secrets/{name}", json=body, headers=auth(admin_token))
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    assert [e["field"] for e in response.json()["errors"]] == [field]


@pytest.mark.usefixtures("acme")
async def test_a_value_of_exactly_64_kib_is_accepted(client: Client, admin_token: str) -> None:
    response = await client.put(
        f"{WS}/secrets/MAX", json={"value": "x" * 64 * 1024}, headers=auth(admin_token)
    )
    assert response.status_code == 201


@pytest.mark.usefixtures("acme")
async def test_unknown_field_in_secret_body_is_rejected(client: Client, admin_token: str) -> None:
    response = await client.put(
        f"{WS}/secrets/TOKEN", json={"value": VALUE, "note": "x"}, headers=auth(admin_token)
    )
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"


@pytest.mark.usefixtures("acme")
async def test_viewer_lists_secrets_but_cannot_set_or_delete_them(
    client: Client, admin_token: str, database_url: str
) -> None:
    await client.put(f"{WS}/secrets/TOKEN", json={"value": VALUE}, headers=auth(admin_token))
    viewer = await make_token(database_url, "viewer", "acme")
    assert (await client.get(f"{WS}/secrets", headers=auth(viewer))).status_code == 200
    responses = [
        await client.put(f"{WS}/secrets/TOKEN", json={"value": "x"}, headers=auth(viewer)),
        await client.delete(f"{WS}/secrets/TOKEN", headers=auth(viewer)),
    ]
    assert [r.status_code for r in responses] == [403, 403]
    assert {r.json()["code"] for r in responses} == {"forbidden"}

    editor = await make_token(database_url, "editor", "acme")
    put = await client.put(f"{WS}/secrets/TOKEN", json={"value": "y"}, headers=auth(editor))
    assert put.status_code == 200
    assert (await client.delete(f"{WS}/secrets/TOKEN", headers=auth(editor))).status_code == 204


@pytest.mark.usefixtures("acme")
async def test_a_token_of_another_workspace_gets_404_on_every_secret_route(
    client: Client, admin_token: str, database_url: str
) -> None:
    await client.put(f"{WS}/secrets/TOKEN", json={"value": VALUE}, headers=auth(admin_token))
    outsider = await make_token(database_url, "owner", "other")
    responses = [
        await client.get(f"{WS}/secrets", headers=auth(outsider)),
        await client.put(f"{WS}/secrets/TOKEN", json={"value": "x"}, headers=auth(outsider)),
        await client.delete(f"{WS}/secrets/TOKEN", headers=auth(outsider)),
    ]
    assert [r.status_code for r in responses] == [404] * 3
    assert {r.json()["code"] for r in responses} == {"not_found"}


@pytest.mark.usefixtures("acme")
async def test_secrets_of_one_workspace_are_invisible_in_another(
    client: Client, admin_token: str
) -> None:
    await client.put(f"{WS}/secrets/TOKEN", json={"value": VALUE}, headers=auth(admin_token))
    other = await client.get("/api/v1/workspaces/other/secrets", headers=auth(admin_token))
    assert other.json()["items"] == []
    gone = await client.delete("/api/v1/workspaces/other/secrets/TOKEN", headers=auth(admin_token))
    assert gone.status_code == 404
