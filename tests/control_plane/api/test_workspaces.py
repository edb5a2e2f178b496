from __future__ import annotations

from tests.support.api import Client, auth, make_token


async def test_admin_creates_workspace_and_sees_it(client: Client, admin_token: str) -> None:
    created = await client.post(
        "/api/v1/workspaces", json={"slug": "acme", "title": "Acme"}, headers=auth(admin_token)
    )
    assert created.status_code == 201, created.text
    listed = await client.get("/api/v1/workspaces", headers=auth(admin_token))
    assert [w["slug"] for w in listed.json()["items"]] == ["acme"]


async def test_request_without_token_is_401_with_challenge(client: Client) -> None:
    response = await client.get("/api/v1/workspaces")
    assert response.status_code == 401
    assert response.headers["www-authenticate"] == "Bearer"
    assert response.json()["code"] == "unauthorized"


async def test_unknown_field_in_body_is_rejected(client: Client, admin_token: str) -> None:
    response = await client.post(
        "/api/v1/workspaces", json={"slug": "acme", "colour": "red"}, headers=auth(admin_token)
    )
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"


async def test_workspace_role_cannot_see_other_workspace(
    client: Client,
    admin_token: str,
    database_url: str,
) -> None:
    for slug in ("a", "b"):
        await client.post("/api/v1/workspaces", json={"slug": slug}, headers=auth(admin_token))
    owner_a = await make_token(database_url, "owner", "a")
    assert (await client.get("/api/v1/workspaces/b", headers=auth(owner_a))).status_code == 404
    assert (await client.get("/api/v1/workspaces/a", headers=auth(owner_a))).status_code == 200
    listed = await client.get("/api/v1/workspaces", headers=auth(owner_a))
    assert [w["slug"] for w in listed.json()["items"]] == ["a"]


async def test_token_keeps_working_after_secret_key_rotation_and_is_rehashed(
    database_url: str, admin_token: str
) -> None:
    from litestar.testing import AsyncTestClient

    from control_plane.app import create_app
    from shared.crypto import KeyHasher
    from shared.settings import Settings
    from tests.support.db import TEST_SECRET_KEY

    new_key = "rotated-secret-key-that-is-long-enough-987654"
    rotated = Settings(
        database_url=database_url, secret_key=new_key, secret_key_previous=(TEST_SECRET_KEY,)
    )
    async with AsyncTestClient(app=create_app(rotated)) as rotated_client:
        assert (
            await rotated_client.get("/api/v1/me", headers=auth(admin_token))
        ).status_code == 200
    without_previous = Settings(database_url=database_url, secret_key=new_key)
    async with AsyncTestClient(app=create_app(without_previous)) as new_client:
        # Re-hashed under the new secret on first use, so the old one is no longer needed.
        assert (await new_client.get("/api/v1/me", headers=auth(admin_token))).status_code == 200
    assert KeyHasher(new_key).hash(admin_token) != KeyHasher(TEST_SECRET_KEY).hash(admin_token)


async def test_body_over_the_size_limit_is_413_and_changes_nothing(
    client: Client, admin_token: str
) -> None:
    huge = {"slug": "big", "title": "x" * 2_000_000}
    response = await client.post("/api/v1/workspaces", json=huge, headers=auth(admin_token))
    assert (response.status_code, response.json()["code"]) == (413, "body_too_large")
    listed = await client.get("/api/v1/workspaces", headers=auth(admin_token))
    assert listed.json()["items"] == []


async def test_reading_one_workspace_shows_it_with_the_callers_role(
    client: Client, admin_token: str, database_url: str
) -> None:
    created = await client.post(
        "/api/v1/workspaces", json={"slug": "acme", "title": "Acme"}, headers=auth(admin_token)
    )
    viewer = await make_token(database_url, "viewer", "acme")
    as_viewer = await client.get("/api/v1/workspaces/acme", headers=auth(viewer))
    as_admin = await client.get("/api/v1/workspaces/acme", headers=auth(admin_token))
    assert as_viewer.json() == {**created.json(), "role": "viewer"}
    assert as_admin.json() == created.json()
    assert created.json()["role"] == "admin"


async def test_a_workspace_slug_with_a_trailing_newline_is_400(
    client: Client, admin_token: str
) -> None:
    response = await client.post(
        "/api/v1/workspaces", json={"slug": "acme\n"}, headers=auth(admin_token)
    )
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
