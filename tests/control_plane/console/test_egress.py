"""The Egress page over HTTP in process: everyone reads the policy; owners replace the
host list and instance admins the grants, as in the admin API; a stale page or a bad
entry writes nothing and says why."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.api import Client, auth, create_workspace, make_token
from tests.support.console import hidden_value, sign_in

API = "/api/v1/workspaces/acme/egress"
UI = "/ui/w/acme/egress"


@pytest.fixture
async def acme(client: Client, admin_token: str) -> None:
    await create_workspace(client, admin_token, "acme")


async def _policy(client: Client, token: str) -> Any:
    answer = await client.get(API, headers=auth(token))
    assert answer.status_code == 200, answer.text
    return answer.json()


async def _form(client: Client) -> dict[str, str]:
    page = await client.get(UI)
    assert page.status_code == 200, page.text
    return {"_csrf": hidden_value(page.text, "_csrf"), "etag": hidden_value(page.text, "etag")}


@pytest.mark.usefixtures("acme")
async def test_an_owner_narrows_the_hosts_and_cannot_grant(
    client: Client, admin_token: str, database_url: str
) -> None:
    await sign_in(client, await make_token(database_url, "owner", workspace="acme"))
    page = await client.get(UI)
    assert "Any host." in page.text
    assert 'action="/ui/w/acme/egress/grants"' not in page.text  # no grant form for owners
    assert 'id="operator-settings"' not in page.text  # nor the instance's settings
    saved = await client.post(
        f"{UI}/hosts", data={**await _form(client), "hosts": "API.example.com\n\n127.0.0.1 \n"}
    )
    assert saved.status_code == 303, saved.text
    assert saved.headers["location"] == f"{UI}?done=hosts"
    assert (await _policy(client, admin_token))["hosts"] == ["api.example.com", "127.0.0.1"]
    shown = await client.get(saved.headers["location"])
    assert "Host list saved" in shown.text
    assert "<code>api.example.com</code>" in shown.text

    refused = await client.post(
        f"{UI}/grants", data={**await _form(client), "grants": "127.0.0.1:9"}
    )
    assert refused.status_code == 403
    assert (await _policy(client, admin_token))["grants"] == []

    any_host = await client.post(f"{UI}/hosts", data={**await _form(client), "any_host": "on"})
    assert any_host.status_code == 303
    assert (await _policy(client, admin_token))["hosts"] is None


@pytest.mark.usefixtures("acme")
async def test_an_editor_reads_the_policy_and_changes_nothing(
    client: Client, admin_token: str, database_url: str
) -> None:
    await sign_in(client, await make_token(database_url, "editor", workspace="acme"))
    page = await client.get(UI)
    assert page.status_code == 200
    assert "Only the workspace's owners change the host list." in page.text
    csrf = hidden_value(page.text, "_csrf")
    etag = (await client.get(API, headers=auth(admin_token))).headers["etag"]
    refused = await client.post(
        f"{UI}/hosts", data={"_csrf": csrf, "etag": etag, "hosts": "api.example.com"}
    )
    assert refused.status_code == 403
    assert (await _policy(client, admin_token))["hosts"] is None


@pytest.mark.usefixtures("acme")
async def test_an_instance_admin_grants_and_bad_entries_or_stale_pages_write_nothing(
    client: Client, admin_token: str
) -> None:
    await sign_in(client, admin_token)
    page = await client.get(UI)
    assert "<code>CRANK_UPSTREAM_ALLOWLIST</code>: empty." in page.text
    first = await _form(client)
    bad = await client.post(f"{UI}/grants", data={**first, "grants": "127.0.0.1:9\nhttp://x/"})
    assert bad.status_code == 400
    assert 'id="grants-error"' in bad.text
    assert "http://x/" in bad.text  # what was typed is kept for correcting
    assert (await _policy(client, admin_token))["grants"] == []

    granted = await client.post(f"{UI}/grants", data={**first, "grants": "127.0.0.1:9\n"})
    assert granted.status_code == 303, granted.text
    assert (await _policy(client, admin_token))["grants"] == ["127.0.0.1:9"]

    stale = await client.post(f"{UI}/grants", data={**first, "grants": ""})  # the old ETag
    assert stale.status_code == 409
    assert "stale_revision" in stale.text
    assert (await _policy(client, admin_token))["grants"] == ["127.0.0.1:9"]
