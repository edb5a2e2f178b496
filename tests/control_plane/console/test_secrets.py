"""The Secrets page over HTTP in process: names only, values write-only (never
rendered back, not even into a refused form), set, replace and delete after
confirming; editors write, as in the admin API, viewers only read names."""

from __future__ import annotations

import pytest

from tests.support.api import Client, auth, create_workspace, make_token
from tests.support.console import sign_in

API = "/api/v1/workspaces/acme/secrets"
UI = "/ui/w/acme/secrets"
VALUE = "sk_live_value-that-must-never-show"


@pytest.fixture
async def acme(client: Client, admin_token: str) -> None:
    await create_workspace(client, admin_token, "acme")


async def _names(client: Client, token: str) -> list[object]:
    answer = await client.get(API, headers=auth(token))
    assert answer.status_code == 200, answer.text
    return [item["name"] for item in answer.json()["items"]]


@pytest.mark.usefixtures("acme")
async def test_an_editor_sets_replaces_and_deletes_a_secret_and_never_sees_its_value(
    client: Client, admin_token: str, database_url: str
) -> None:
    csrf = await sign_in(client, await make_token(database_url, "editor", workspace="acme"))
    page = await client.get(UI)
    assert 'type="password"' in page.text
    created = await client.post(UI, data={"_csrf": csrf, "name": "stripe_key", "value": VALUE})
    assert created.status_code == 303
    assert created.headers["location"] == f"{UI}?done=created"
    assert await _names(client, admin_token) == ["stripe_key"]
    listed = await client.get(created.headers["location"])
    assert "stripe_key" in listed.text
    assert VALUE not in listed.text

    same = await client.post(UI, data={"_csrf": csrf, "name": "stripe_key", "value": VALUE})
    assert same.headers["location"] == f"{UI}?done=unchanged"
    replaced = await client.post(
        UI, data={"_csrf": csrf, "name": "stripe_key", "value": VALUE + "2"}
    )
    assert replaced.headers["location"] == f"{UI}?done=replaced"

    delete = f"{UI}/stripe_key/delete"
    assert f'href="{delete}"' in (await client.get(UI)).text
    assert (await client.get(delete)).status_code == 200
    assert await _names(client, admin_token) == ["stripe_key"]  # asking is not deleting
    deleted = await client.post(delete, data={"_csrf": csrf})
    assert deleted.status_code == 303
    assert await _names(client, admin_token) == []
    assert (await client.get(delete)).status_code == 404


@pytest.mark.usefixtures("acme")
async def test_a_refused_secret_says_why_and_does_not_echo_the_value(
    client: Client, admin_token: str, database_url: str
) -> None:
    csrf = await sign_in(client, await make_token(database_url, "editor", workspace="acme"))
    bad_name = await client.post(UI, data={"_csrf": csrf, "name": "no spaces", "value": VALUE})
    assert bad_name.status_code == 400
    assert 'id="name-error"' in bad_name.text
    assert 'value="no spaces"' in bad_name.text  # the name stays in the form
    assert VALUE not in bad_name.text  # the value never comes back
    empty = await client.post(UI, data={"_csrf": csrf, "name": "ok_name", "value": ""})
    assert empty.status_code == 400
    assert 'id="value-error"' in empty.text
    assert await _names(client, admin_token) == []


@pytest.mark.usefixtures("acme")
async def test_a_viewer_sees_names_but_no_write_controls_and_a_forged_write_is_refused(
    client: Client, admin_token: str, database_url: str
) -> None:
    stored = await client.put(
        f"{API}/db_password", json={"value": VALUE}, headers=auth(admin_token)
    )
    assert stored.status_code == 201
    csrf = await sign_in(client, await make_token(database_url, "viewer", workspace="acme"))
    page = await client.get(UI)
    assert page.status_code == 200
    assert "db_password" in page.text
    assert VALUE not in page.text
    assert 'type="password"' not in page.text
    assert "/delete" not in page.text
    forged = await client.post(UI, data={"_csrf": csrf, "name": "db_password", "value": "x"})
    assert forged.status_code == 403
    assert (await client.post(f"{UI}/db_password/delete", data={"_csrf": csrf})).status_code == 403
    assert await _names(client, admin_token) == ["db_password"]
