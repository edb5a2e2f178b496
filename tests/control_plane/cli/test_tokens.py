"""``crank tokens create``: straight against the database, only the token on stdout."""

from __future__ import annotations

from control_plane.auth import Principal
from control_plane.services.workspaces import create_workspace
from shared.db import connect
from shared.keys import KeyKind, parse_key
from tests.support.api import Client, auth
from tests.support.local_commands import crank, crank_env


async def _make_workspace(database_url: str, slug: str) -> None:
    admin = Principal(
        user_id=0, name="test", token_id=0, token_prefix="test", is_instance_admin=True
    )
    async with await connect(database_url) as conn:
        await create_workspace(conn, admin, slug, slug)
        await conn.commit()


async def test_tokens_create_prints_only_an_admin_token_that_works(
    database_url: str, client: Client
) -> None:
    run = await crank("tokens", "create", "--role", "admin", env=crank_env(database_url))

    assert run.code == 0, run.stderr
    token = run.stdout.removesuffix("\n")
    assert "\n" not in token
    assert parse_key(token) is KeyKind.ADMIN
    me = await client.get("/api/v1/me", headers=auth(token))
    assert me.status_code == 200
    assert me.json()["instance_admin"] is True
    assert token not in run.stderr


async def test_tokens_create_gives_a_workspace_role(database_url: str, client: Client) -> None:
    await _make_workspace(database_url, "team")
    run = await crank(
        "tokens",
        "create",
        "--role",
        "editor",
        "--workspace",
        "team",
        "--name",
        "ci",
        env=crank_env(database_url),
    )

    assert run.code == 0, run.stderr
    me = (await client.get("/api/v1/me", headers=auth(run.stdout.strip()))).json()
    assert me["name"] == "ci"
    assert me["instance_admin"] is False
    assert [(w["slug"], w["role"]) for w in me["workspaces"]] == [("team", "editor")]


async def test_tokens_create_for_a_missing_workspace_exits_2(database_url: str) -> None:
    run = await crank(
        "tokens", "create", "--role", "viewer", "--workspace", "nope", env=crank_env(database_url)
    )

    assert run.code == 2
    assert run.stdout == ""
    assert "workspace 'nope' does not exist" in run.stderr


async def test_tokens_create_without_settings_exits_2(database_url: str) -> None:
    no_secret = await crank(
        "tokens", "create", "--role", "admin", env=crank_env(database_url, secret_key=None)
    )
    no_database = await crank("tokens", "create", "--role", "admin", env=crank_env(None))

    assert (no_secret.code, no_secret.stdout) == (2, "")
    assert "CRANK_SECRET_KEY" in no_secret.stderr
    assert (no_database.code, no_database.stdout) == (2, "")
    assert "CRANK_DATABASE_URL" in no_database.stderr


async def test_tokens_create_refuses_mismatched_role_and_workspace(database_url: str) -> None:
    admin_in_workspace = await crank(
        "tokens", "create", "--role", "admin", "--workspace", "x", env=crank_env(database_url)
    )
    editor_nowhere = await crank(
        "tokens", "create", "--role", "editor", env=crank_env(database_url)
    )

    assert (admin_in_workspace.code, admin_in_workspace.stdout) == (2, "")
    assert (editor_nowhere.code, editor_nowhere.stdout) == (2, "")


async def test_tokens_list_shows_prefixes_and_revoke_stops_the_token(
    database_url: str, client: Client
) -> None:
    env = crank_env(database_url)
    token = (await crank("tokens", "create", "--role", "admin", env=env)).stdout.strip()
    prefix = token[: len("crk_admin_") + 8]

    listed = await crank("tokens", "list", env=env)
    assert listed.code == 0, listed.stderr
    assert prefix in listed.stdout
    assert token not in listed.stdout

    revoked = await crank("tokens", "revoke", prefix, env=env)
    assert revoked.code == 0, revoked.stderr
    assert (await client.get("/api/v1/me", headers=auth(token))).status_code == 401
    again = await crank("tokens", "revoke", prefix, env=env)
    assert again.code == 2
