"""``/api/v1/workspaces/{ws}/egress``: the policy's API (roles, If-Match, audit,
validation) and try-it under it.

The try-it upstream is a JSON server on 127.0.0.1 that the control plane's
settings allowlist (``CRANK_UPSTREAM_ALLOWLIST``), as an operator allowlists an
internal host; only the workspace granted it may reach it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import psycopg
import pytest
from litestar.testing import AsyncTestClient

from control_plane.app import create_app
from shared.settings import Settings
from tests.support.api import Client, auth, grant_egress, make_token
from tests.support.db import TEST_SECRET_KEY
from tests.support.threaded_http import JsonHandler, ThreadedServer, serve_threaded

EGRESS = "/api/v1/workspaces/{}/egress"


def audit_rows(database_url: str, action: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            """SELECT w.slug, a.actor, a.resource_type, a.resource_name, a.details
                 FROM audit_log a JOIN workspaces w ON w.id = a.workspace_id
                WHERE a.action = %s ORDER BY a.id""",
            (action,),
        ).fetchall()


def catalog_version(database_url: str) -> int:
    with psycopg.connect(database_url) as conn:
        row = conn.execute("SELECT version FROM catalog_state").fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def upstream() -> Iterator[ThreadedServer]:
    with serve_threaded(JsonHandler) as server:
        yield server


@pytest.fixture
async def egress_client(database_url: str, upstream: ThreadedServer) -> AsyncIterator[Client]:
    settings = Settings(
        database_url=database_url,
        secret_key=TEST_SECRET_KEY,
        upstream_allowlist=(f"127.0.0.1:{upstream.port}",),
    )
    async with AsyncTestClient(app=create_app(settings)) as test_client:
        yield test_client


async def make_workspaces(client: Client, admin: str, *slugs: str) -> None:
    for slug in slugs:
        created = await client.post("/api/v1/workspaces", json={"slug": slug}, headers=auth(admin))
        assert created.status_code == 201, created.text


async def read(client: Client, token: str, slug: str = "acme") -> Any:
    response = await client.get(EGRESS.format(slug), headers=auth(token))
    assert response.status_code == 200, response.text
    return response


async def test_a_new_workspace_calls_any_public_host_and_no_private_one(
    client: Client, admin_token: str, database_url: str
) -> None:
    await make_workspaces(client, admin_token, "acme")
    viewer = await make_token(database_url, "viewer", "acme")
    response = await read(client, viewer)
    assert response.json() == {"hosts": None, "grants": [], "revision": 1}
    assert response.headers["etag"].endswith('.r1"')


async def test_the_owner_narrows_the_host_list_with_if_match_and_it_is_audited(
    client: Client, admin_token: str, database_url: str
) -> None:
    await make_workspaces(client, admin_token, "acme")
    owner = await make_token(database_url, "owner", "acme", name="olga")
    etag = (await read(client, owner)).headers["etag"]
    before = catalog_version(database_url)
    hosts = ["API.Example.com.", "*.Sales.example", "[2001:db8::1]", "api.example.com"]
    response = await client.put(
        EGRESS.format("acme") + "/hosts", json={"hosts": hosts}, headers=auth(owner, etag)
    )
    assert response.status_code == 200, response.text
    canonical = ["api.example.com", "*.sales.example", "2001:db8::1"]
    assert response.json() == {"hosts": canonical, "grants": [], "revision": 2}
    assert response.headers["etag"] != etag
    assert catalog_version(database_url) > before
    ((slug, actor, resource_type, name, details),) = audit_rows(database_url, "egress.set_hosts")
    assert (slug, resource_type, name) == ("acme", "egress", "acme")
    assert actor.startswith("olga (crk_admin_")
    assert details == {"before": None, "after": canonical, "revision": 2}

    # The ETag read before is stale now; the same list again changes nothing.
    stale = await client.put(
        EGRESS.format("acme") + "/hosts", json={"hosts": None}, headers=auth(owner, etag)
    )
    assert (stale.status_code, stale.json()["code"]) == (409, "stale_revision")
    version = catalog_version(database_url)
    same = await client.put(
        EGRESS.format("acme") + "/hosts",
        json={"hosts": canonical},
        headers=auth(owner, response.headers["etag"]),
    )
    assert same.json()["revision"] == 2
    assert catalog_version(database_url) == version
    assert len(audit_rows(database_url, "egress.set_hosts")) == 1


async def test_only_an_instance_admin_grants_private_destinations(
    client: Client, admin_token: str, database_url: str
) -> None:
    await make_workspaces(client, admin_token, "acme")
    owner = await make_token(database_url, "owner", "acme")
    editor = await make_token(database_url, "editor", "acme")
    etag = (await read(client, owner)).headers["etag"]
    grants = {"grants": ["10.0.0.5:8080"]}
    for token in (owner, editor):
        refused = await client.put(
            EGRESS.format("acme") + "/grants", json=grants, headers=auth(token, etag)
        )
        assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    assert "instance admin role" in refused.json()["message"]
    hosts = await client.put(
        EGRESS.format("acme") + "/hosts", json={"hosts": []}, headers=auth(editor, etag)
    )
    assert (hosts.status_code, hosts.json()["code"]) == (403, "forbidden")
    missing = await client.put(
        EGRESS.format("acme") + "/grants", json=grants, headers=auth(admin_token)
    )
    assert (missing.status_code, missing.json()["code"]) == (428, "if_match_required")
    granted = await client.put(
        EGRESS.format("acme") + "/grants", json=grants, headers=auth(admin_token, etag)
    )
    assert granted.status_code == 200, granted.text
    assert granted.json() == {"hosts": None, "grants": ["10.0.0.5:8080"], "revision": 2}
    ((slug, _, _, _, details),) = audit_rows(database_url, "egress.set_grants")
    assert (slug, details) == ("acme", {"before": [], "after": ["10.0.0.5:8080"], "revision": 2})


@pytest.mark.parametrize(
    ("path", "body", "fields"),
    [
        (
            "/hosts",
            {"hosts": ["https://api.example.com", "ok.example", "api.example.com:443", "*"]},
            ["hosts[0]", "hosts[2]", "hosts[3]"],
        ),
        ("/hosts", {"hosts": [f"h{n}.example" for n in range(257)]}, ["hosts"]),
        ("/grants", {"grants": ["10.0.0.5", "internal", "*.corp:80", "[::1]"]}, None),
    ],
)
async def test_malformed_entries_are_refused_by_field_and_change_nothing(
    client: Client,
    admin_token: str,
    database_url: str,
    path: str,
    body: dict[str, Any],
    fields: list[str] | None,
) -> None:
    await make_workspaces(client, admin_token, "acme")
    etag = (await read(client, admin_token)).headers["etag"]
    response = await client.put(
        EGRESS.format("acme") + path, json=body, headers=auth(admin_token, etag)
    )
    assert (response.status_code, response.json()["code"]) == (400, "validation_failed")
    reported = [e["field"] for e in response.json()["errors"]]
    assert reported == (fields or ["grants[1]", "grants[2]", "grants[3]"])
    assert (await read(client, admin_token)).json()["revision"] == 1


# --- try-it under the policy --------------------------------------------------------------


def operation(port: int, path: str = "/data") -> dict[str, Any]:
    return {
        "name": "read_data",
        "description": "Reads the data. Use when the user asks for the data.",
        "input": {"type": "object", "properties": {}},
        "request": {"method": "GET", "url": f"http://127.0.0.1:{port}{path}"},
        "response": {"select": "@"},
    }


async def try_read(client: Client, token: str, slug: str, **body: Any) -> Any:
    response = await client.post(
        f"/api/v1/workspaces/{slug}/operations/read_data/try", json=body, headers=auth(token)
    )
    assert response.status_code == 200, response.text
    return response.json()


async def test_try_it_reaches_an_allowlisted_host_only_from_the_workspace_granted_it(
    egress_client: Client, admin_token: str, upstream: ThreadedServer, database_url: str
) -> None:
    client = egress_client
    await make_workspaces(client, admin_token, "tenant-a", "tenant-b")
    for slug in ("tenant-a", "tenant-b"):
        created = await client.post(
            f"/api/v1/workspaces/{slug}/operations",
            json=operation(upstream.port),
            headers=auth(admin_token),
        )
        assert created.status_code == 201, created.text
    await grant_egress(client, admin_token, "tenant-a", f"127.0.0.1:{upstream.port}")
    editor_b = await make_token(database_url, "editor", "tenant-b", name="eve")

    granted = await try_read(client, admin_token, "tenant-a")
    assert granted["result"]["is_error"] is False
    assert granted["result"]["structured_content"] == {"method": "GET", "path": "/data"}

    refused = await try_read(client, editor_b, "tenant-b")
    assert refused["result"]["is_error"] is True
    assert refused["result"]["structured_content"]["error_code"] == "upstream_blocked"
    assert refused["result"]["details"]["reason"] == (
        "the workspace's egress policy does not allow 127.0.0.1"
    )
    assert refused["upstream"]["status"] is None
    assert upstream.hits == ["GET /data"]  # tenant-a's call only

    rows = audit_rows(database_url, "operation.try")
    assert [(slug, details["outcome"]) for slug, *_, details in rows] == [
        ("tenant-a", "ok"),
        ("tenant-b", "upstream_blocked"),
    ]
    slug, actor, resource_type, name, details = rows[1]
    assert actor.startswith("eve (crk_admin_")
    assert (resource_type, name) == ("operation", "read_data")
    assert details == {
        "method": "GET",
        "host": "127.0.0.1",
        "port": upstream.port,
        "revision": 1,
        "status": None,
        "outcome": "upstream_blocked",
        "attempts": 1,
    }


async def test_try_it_of_a_host_outside_the_workspaces_host_list_is_blocked(
    egress_client: Client, admin_token: str, upstream: ThreadedServer, database_url: str
) -> None:
    client = egress_client
    await make_workspaces(client, admin_token, "acme")
    created = await client.post(
        "/api/v1/workspaces/acme/operations",
        json=operation(upstream.port),
        headers=auth(admin_token),
    )
    assert created.status_code == 201, created.text
    await grant_egress(client, admin_token, "acme", f"127.0.0.1:{upstream.port}")
    etag = (await read(client, admin_token)).headers["etag"]
    narrowed = await client.put(
        EGRESS.format("acme") + "/hosts",
        json={"hosts": ["api.example.com"]},
        headers=auth(admin_token, etag),
    )
    assert narrowed.status_code == 200, narrowed.text
    report = await try_read(client, admin_token, "acme")
    assert report["result"]["structured_content"]["error_code"] == "upstream_blocked"
    assert upstream.hits == []


async def test_every_try_it_is_audited_also_one_that_stops_before_the_call(
    egress_client: Client, admin_token: str, upstream: ThreadedServer, database_url: str
) -> None:
    client = egress_client
    await make_workspaces(client, admin_token, "acme")
    spec = operation(upstream.port)
    spec["input"] = {
        "type": "object",
        "properties": {"q": {"type": "string", "description": "what to look for"}},
        "required": ["q"],
    }
    created = await client.post(
        "/api/v1/workspaces/acme/operations", json=spec, headers=auth(admin_token)
    )
    assert created.status_code == 201, created.text
    await grant_egress(client, admin_token, "acme", f"127.0.0.1:{upstream.port}")
    ok = await try_read(client, admin_token, "acme", arguments={"q": "private-words"})
    invalid = await try_read(client, admin_token, "acme", arguments={})
    assert (ok["audited"], invalid["audited"]) == (True, True)
    assert invalid["result"]["structured_content"]["error_code"] == "invalid_arguments"
    rows = audit_rows(database_url, "operation.try")
    outcomes = [(d["method"], d["host"], d["outcome"], d["attempts"]) for *_, d in rows]
    assert outcomes == [
        ("GET", "127.0.0.1", "ok", 1),
        ("GET", "127.0.0.1", "invalid_arguments", 0),
    ]
    assert "private-words" not in str(rows)  # argument values never reach the audit log
