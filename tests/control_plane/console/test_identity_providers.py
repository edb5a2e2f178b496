"""The Identity providers page over HTTP in process: everyone reads the providers and
which agents name them; owners add, edit and delete them through the service the
admin API uses (its checks, If-Match, audit), a refusal shown beside its field with
what was typed kept; a delete is refused while an agent names the provider."""

from __future__ import annotations

from typing import Any

import pytest

from tests.support.api import Client, auth, create_workspace, make_token
from tests.support.console import hidden_value, sign_in

API = "/api/v1/workspaces/acme/identity-providers"
UI = "/ui/w/acme/identity-providers"
ISSUER = "https://id.example.com/realms/staff"
CORP: dict[str, Any] = {
    "name": "corp",
    "issuer": ISSUER,
    "algorithms": ["RS256", "ES256"],
    "token_types": ["at+jwt"],
    "subject_claim": "sub",
    "groups_claim": "",
    "leeway_s": "30",
}


@pytest.fixture
async def acme(client: Client, admin_token: str) -> None:
    await create_workspace(client, admin_token, "acme")


async def _providers(client: Client, token: str) -> dict[str, Any]:
    answer = await client.get(API, headers=auth(token))
    assert answer.status_code == 200, answer.text
    return {item["name"]: item for item in answer.json()["items"]}


async def _audit_actions(client: Client, token: str) -> list[str]:
    answer = await client.get(
        "/api/v1/workspaces/acme/audit", params={"action": "identity_provider"}, headers=auth(token)
    )
    assert answer.status_code == 200, answer.text
    return [item["action"] for item in reversed(answer.json()["items"])]


async def _edit_form(client: Client, path: str) -> dict[str, str]:
    page = await client.get(path)
    assert page.status_code == 200, page.text
    return {"_csrf": hidden_value(page.text, "_csrf"), "etag": hidden_value(page.text, "etag")}


@pytest.mark.usefixtures("acme")
async def test_an_owner_adds_edits_and_deletes_a_provider(
    client: Client, admin_token: str, database_url: str
) -> None:
    csrf = await sign_in(client, await make_token(database_url, "owner", workspace="acme"))
    listed = await client.get(UI)
    assert "No identity providers" in listed.text
    assert f'href="{UI}"' in listed.text  # in the workspace's navigation
    created = await client.post(UI, data={"_csrf": csrf, **CORP})
    assert created.status_code == 303, created.text
    assert created.headers["location"] == f"{UI}?done=created"
    stored = (await _providers(client, admin_token))["corp"]
    assert stored["issuer"] == CORP["issuer"]
    assert stored["algorithms"] == ["RS256", "ES256"]
    assert stored["groups_claim"] is None  # an empty field: no groups claim
    assert stored["introspection"] is None
    shown = await client.get(created.headers["location"])
    assert "Identity provider added" in shown.text
    assert f'href="{UI}/corp"' in shown.text

    # Edit: a groups claim, introspection with a secret chosen by name.
    await client.put(
        "/api/v1/workspaces/acme/secrets/idp_client",
        json={"value": "introspection-secret-value"},
        headers=auth(admin_token),
    )
    form = await _edit_form(client, f"{UI}/corp")
    change = {
        **CORP,
        **form,
        "groups_claim": "groups",
        "introspection.client_id": "crank",
        "introspection.client_secret": "idp_client",
    }
    saved = await client.post(f"{UI}/corp", data=change)
    assert saved.status_code == 303, saved.text
    assert saved.headers["location"] == f"{UI}/corp?done=saved"
    stored = (await _providers(client, admin_token))["corp"]
    assert stored["groups_claim"] == "groups"
    assert stored["introspection"] == {"client_id": "crank", "client_secret": "idp_client"}
    page = await client.get(saved.headers["location"])
    assert "workspace secret <code>idp_client</code>" in page.text
    assert "introspection-secret-value" not in page.text
    same = await client.post(
        f"{UI}/corp", data={**change, **await _edit_form(client, f"{UI}/corp")}
    )
    assert same.headers["location"] == f"{UI}/corp?done=unchanged"

    stale = await client.post(f"{UI}/corp", data={**change, "leeway_s": "5"})  # the old ETag
    assert stale.status_code == 409
    assert "stale_revision" in stale.text
    assert (await _providers(client, admin_token))["corp"]["leeway_s"] == 30

    delete = f"{UI}/corp/delete"
    asked = await client.get(delete)
    assert asked.status_code == 200
    assert "Stop trusting corp" in asked.text
    deleted = await client.post(
        delete, data={"_csrf": csrf, "etag": hidden_value(asked.text, "etag")}
    )
    assert deleted.status_code == 303, deleted.text
    assert deleted.headers["location"] == f"{UI}?done=deleted"
    assert await _providers(client, admin_token) == {}
    assert await _audit_actions(client, admin_token) == [
        "identity_provider.create",
        "identity_provider.update",
        "identity_provider.delete",
    ]


@pytest.mark.usefixtures("acme")
async def test_refused_settings_are_shown_beside_their_fields_and_kept(
    client: Client, admin_token: str, database_url: str
) -> None:
    csrf = await sign_in(client, await make_token(database_url, "owner", workspace="acme"))
    plain_http = await client.post(
        UI, data={"_csrf": csrf, **CORP, "issuer": "http://id.example.com"}
    )
    assert plain_http.status_code == 400
    assert 'id="issuer-error"' in plain_http.text
    assert "https required" in plain_http.text
    assert 'value="http://id.example.com"' in plain_http.text  # kept for correcting

    symmetric = await client.post(UI, data={"_csrf": csrf, **CORP, "algorithms": ["HS256"]})
    assert symmetric.status_code == 400
    assert 'id="algorithms-error"' in symmetric.text
    assert "HS256 not allowed" in symmetric.text

    no_secret = await client.post(
        UI, data={"_csrf": csrf, **CORP, "introspection.client_id": "crank"}
    )
    assert no_secret.status_code == 400
    assert 'id="introspection.client_secret-error"' in no_secret.text
    assert 'id="introspection.client_id-error"' not in no_secret.text

    not_a_number = await client.post(UI, data={"_csrf": csrf, **CORP, "leeway_s": "soon"})
    assert not_a_number.status_code == 400
    assert 'id="leeway_s-error"' in not_a_number.text
    assert await _providers(client, admin_token) == {}

    assert (await client.post(UI, data={"_csrf": csrf, **CORP})).status_code == 303
    taken = await client.post(UI, data={"_csrf": csrf, **CORP, "issuer": "https://other.example"})
    assert taken.status_code == 409
    assert "identity provider &#39;corp&#39; already exists" in taken.text

    form = await _edit_form(client, f"{UI}/corp")
    bad_edit = await client.post(
        f"{UI}/corp", data={**CORP, **form, "token_types": [], "subject_claim": "email"}
    )
    assert bad_edit.status_code == 400
    assert 'id="token_types-error"' in bad_edit.text
    assert 'value="email"' in bad_edit.text
    assert (await _providers(client, admin_token))["corp"]["subject_claim"] == "sub"


@pytest.mark.usefixtures("acme")
async def test_a_delete_is_refused_while_an_agent_names_the_provider(
    client: Client, admin_token: str, database_url: str
) -> None:
    created = await client.post(
        API, json={"name": "corp", "issuer": CORP["issuer"]}, headers=auth(admin_token)
    )
    assert created.status_code == 201, created.text
    agent = await client.post(
        "/api/v1/workspaces/acme/agents",
        json={"slug": "sales", "operations": [], "auth": {"providers": ["corp"]}},
        headers=auth(admin_token),
    )
    assert agent.status_code == 201, agent.text
    csrf = await sign_in(client, await make_token(database_url, "owner", workspace="acme"))
    listed = await client.get(UI)
    assert '<a href="/ui/w/acme/agents/sales">sales</a>' in listed.text
    refused = await client.post(
        f"{UI}/corp/delete", data={"_csrf": csrf, "etag": created.headers["etag"]}
    )
    assert refused.status_code == 409
    assert "is named by agents sales; remove it from their auth.providers first" in refused.text
    assert "corp" in await _providers(client, admin_token)


@pytest.mark.usefixtures("acme")
async def test_viewers_and_editors_read_and_change_nothing(
    client: Client, admin_token: str, database_url: str
) -> None:
    created = await client.post(
        API, json={"name": "corp", "issuer": CORP["issuer"]}, headers=auth(admin_token)
    )
    etag = created.headers["etag"]
    for role in ("viewer", "editor"):
        csrf = await sign_in(client, await make_token(database_url, role, workspace="acme"))
        listed = await client.get(UI)
        assert listed.status_code == 200
        assert "<code>corp</code>" in listed.text
        assert "Only the workspace's owners" in listed.text
        assert f'action="{UI}"' not in listed.text
        page = await client.get(f"{UI}/corp")
        assert page.status_code == 200
        assert ISSUER in page.text
        assert f'action="{UI}/corp"' not in page.text
        assert f'href="{UI}/corp/delete"' not in page.text
        writes: dict[str, dict[str, Any]] = {
            UI: {**CORP, "name": "other", "issuer": "https://other.example"},
            f"{UI}/corp": {**CORP, "etag": etag, "leeway_s": "5"},
            f"{UI}/corp/delete": {"etag": etag},
        }
        for path, data in writes.items():
            refused = await client.post(path, data={"_csrf": csrf, **data})
            assert refused.status_code == 403, (role, path)
        assert (await client.get(f"{UI}/corp/delete")).status_code == 403
    assert list(await _providers(client, admin_token)) == ["corp"]
    assert (await _providers(client, admin_token))["corp"]["leeway_s"] == 30
