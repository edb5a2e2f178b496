"""``/api/v1/workspaces/{ws}/identity-providers``: a workspace's trusted identity
providers — validation with TrustedIssuer's rules, If-Match, roles, audit, and
the catalog bump that carries a change to the gateways."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.support.api import Client, auth, create_workspace, make_token

PROVIDERS = "/api/v1/workspaces/acme/identity-providers"
CORP = {"name": "corp", "issuer": "https://id.example.com/realms/staff/"}


def catalog_version(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT version FROM catalog_state").fetchone()
    assert row is not None
    return int(row[0])


def audit_rows(database_url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            """SELECT action, actor, resource_type, resource_name, details FROM audit_log
                WHERE action LIKE 'identity_provider.%' ORDER BY id"""
        ).fetchall()


async def owner(client: Client, admin_token: str, database_url: str) -> str:
    await create_workspace(client, admin_token, "acme")
    return await make_token(database_url, "owner", "acme", name="alice")


async def test_create_read_replace_delete_with_etags_audit_and_catalog_bumps(
    client: Client, admin_token: str, database_url: str
) -> None:
    token = await owner(client, admin_token, database_url)
    version = catalog_version(database_url)

    created = await client.post(PROVIDERS, json=CORP, headers=auth(token))
    assert created.status_code == 201, created.text
    body = created.json()
    # Stored byte for byte (trailing slash kept), TrustedIssuer's defaults filled in.
    assert body["issuer"] == "https://id.example.com/realms/staff/"
    assert body["subject_claim"] == "sub"
    assert body["token_types"] == ["at+jwt"]
    assert "HS256" not in body["algorithms"]
    assert "RS256" in body["algorithms"]
    assert body["introspection"] is None
    assert body["revision"] == 1
    assert catalog_version(database_url) == version + 1

    listed = await client.get(PROVIDERS, headers=auth(token))
    assert [p["name"] for p in listed.json()["items"]] == ["corp"]
    read = await client.get(f"{PROVIDERS}/corp", headers=auth(token))
    assert read.headers["etag"] == created.headers["etag"]

    change = {**CORP, "groups_claim": "groups", "algorithms": ["ES256"]}
    no_etag = await client.put(f"{PROVIDERS}/corp", json=change, headers=auth(token))
    assert no_etag.status_code == 428
    replaced = await client.put(
        f"{PROVIDERS}/corp", json=change, headers=auth(token, created.headers["etag"])
    )
    assert replaced.status_code == 200, replaced.text
    assert replaced.json()["groups_claim"] == "groups"
    assert replaced.json()["algorithms"] == ["ES256"]
    assert replaced.json()["revision"] == 2
    stale = await client.put(
        f"{PROVIDERS}/corp", json=change, headers=auth(token, created.headers["etag"])
    )
    assert (stale.status_code, stale.json()["code"]) == (409, "stale_revision")

    # The same settings again: no revision, no audit row, no catalog bump.
    version = catalog_version(database_url)
    same = await client.put(
        f"{PROVIDERS}/corp", json=change, headers=auth(token, replaced.headers["etag"])
    )
    assert same.json()["revision"] == 2
    assert catalog_version(database_url) == version

    gone = await client.delete(f"{PROVIDERS}/corp", headers=auth(token, replaced.headers["etag"]))
    assert gone.status_code == 204
    assert catalog_version(database_url) == version + 1
    assert (await client.get(f"{PROVIDERS}/corp", headers=auth(token))).status_code == 404

    rows = audit_rows(database_url)
    assert [(action, kind, name) for action, _, kind, name, _ in rows] == [
        ("identity_provider.create", "identity_provider", "corp"),
        ("identity_provider.update", "identity_provider", "corp"),
        ("identity_provider.delete", "identity_provider", "corp"),
    ]
    assert all(actor.startswith("alice ") for _, actor, *_ in rows)


async def test_bad_settings_are_refused_field_by_field(
    client: Client, admin_token: str, database_url: str
) -> None:
    token = await owner(client, admin_token, database_url)
    cases = [
        ({"name": "Corp_1", "issuer": "https://id.example.com"}, "name"),
        ({"name": "corp", "issuer": "http://id.example.com"}, "issuer"),
        ({"name": "corp", "issuer": "https://id.example.com?x=1"}, "issuer"),
        (
            {"name": "corp", "issuer": "https://id.example.com", "algorithms": ["HS256"]},
            "algorithms",
        ),
        ({"name": "corp", "issuer": "https://id.example.com", "algorithms": []}, "algorithms"),
        (
            {"name": "corp", "issuer": "https://id.example.com", "token_types": ["jwt"]},
            "token_types",
        ),
        ({"name": "corp", "issuer": "https://id.example.com", "leeway_s": 301}, "leeway_s"),
        (
            {"name": "corp", "issuer": "https://id.example.com", "subject_claim": ""},
            "subject_claim",
        ),
        (
            {
                "name": "corp",
                "issuer": "https://id.example.com",
                "introspection": {"client_id": "crank", "client_secret": "missing"},
            },
            "introspection.client_secret",
        ),
    ]
    for body, field in cases:
        answer = await client.post(PROVIDERS, json=body, headers=auth(token))
        assert answer.status_code == 400, (body, answer.text)
        assert [e["field"] for e in answer.json()["errors"]] == [field], (body, answer.text)
    unknown = await client.post(PROVIDERS, json={**CORP, "jwks": "x"}, headers=auth(token))
    assert unknown.status_code == 400
    assert "jwks" in unknown.text
    assert audit_rows(database_url) == []


async def test_loopback_http_and_introspection_with_an_existing_secret(
    client: Client, admin_token: str, database_url: str
) -> None:
    token = await owner(client, admin_token, database_url)
    secret = await client.put(
        "/api/v1/workspaces/acme/secrets/idp-client",
        json={"value": "s3cret-value"},
        headers=auth(token),
    )
    assert secret.status_code == 201
    body = {
        "name": "local",
        "issuer": "http://127.0.0.1:8080",
        "introspection": {"client_id": "crank", "client_secret": "idp-client"},
    }
    created = await client.post(PROVIDERS, json=body, headers=auth(token))
    assert created.status_code == 201, created.text
    assert created.json()["introspection"] == {"client_id": "crank", "client_secret": "idp-client"}
    # The secret's value is in no answer and no audit row.
    assert "s3cret-value" not in created.text
    assert "s3cret-value" not in repr(audit_rows(database_url))


async def test_names_and_issuers_are_unique_per_workspace(
    client: Client, admin_token: str, database_url: str
) -> None:
    token = await owner(client, admin_token, database_url)
    assert (await client.post(PROVIDERS, json=CORP, headers=auth(token))).status_code == 201
    again = await client.post(PROVIDERS, json=CORP, headers=auth(token))
    assert (again.status_code, again.json()["code"]) == (409, "already_exists")
    same_issuer = await client.post(PROVIDERS, json={**CORP, "name": "corp2"}, headers=auth(token))
    assert (same_issuer.status_code, same_issuer.json()["code"]) == (409, "already_exists")
    assert "issuer" in same_issuer.json()["message"]


async def test_editors_read_but_only_owners_write(
    client: Client, admin_token: str, database_url: str
) -> None:
    token = await owner(client, admin_token, database_url)
    assert (await client.post(PROVIDERS, json=CORP, headers=auth(token))).status_code == 201
    editor = await make_token(database_url, "editor", "acme", name="ed")
    viewer = await make_token(database_url, "viewer", "acme", name="vi")
    assert (await client.get(f"{PROVIDERS}/corp", headers=auth(viewer))).status_code == 200
    refused = await client.post(PROVIDERS, json={**CORP, "name": "x"}, headers=auth(editor))
    assert refused.status_code == 403


async def test_a_replace_names_the_provider_of_its_url(
    client: Client, admin_token: str, database_url: str
) -> None:
    token = await owner(client, admin_token, database_url)
    created = await client.post(PROVIDERS, json=CORP, headers=auth(token))
    renamed = await client.put(
        f"{PROVIDERS}/corp",
        json={**CORP, "name": "other"},
        headers=auth(token, created.headers["etag"]),
    )
    assert renamed.status_code == 400
    assert [e["field"] for e in renamed.json()["errors"]] == ["name"]
