"""Every workspace route, enumerated from the app itself: another workspace's
token gets 404 and a viewer cannot write. A new route without a sample body
here fails the test, so no route escapes these checks."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from litestar import Litestar
from litestar.routes import HTTPRoute

from tests.support.api import Client, auth, make_token

OPERATION: dict[str, Any] = {
    "name": "op",
    "description": "Gets an order by id. Use when the user asks about one order.",
    "input": {
        "type": "object",
        "properties": {"order_id": {"type": "string", "description": "Order id"}},
        "required": ["order_id"],
    },
    "request": {"method": "GET", "url": "https://sales.example/orders/{order_id}"},
}

# (method, route path) -> a body the route accepts, so the handler itself answers.
SAMPLE_BODIES: dict[tuple[str, str], Any] = {
    ("POST", "/operations"): {**OPERATION, "name": "op2"},
    ("PUT", "/operations/{name:str}"): {**OPERATION, "title": "Changed"},
    # Never reaches the upstream here: the tokens below are refused first.
    ("POST", "/operations/{name:str}/try"): {"arguments": {"order_id": "1"}},
    ("POST", "/agents"): {"slug": "ag2", "operations": ["op"]},
    ("PUT", "/agents/{slug:str}"): {"slug": "ag", "title": "Changed", "operations": ["op"]},
    ("POST", "/keys"): {"agent": "ag"},
    ("PUT", "/secrets/{name:str}"): {"value": "s3cr3t"},
    ("POST", "/apply"): {"operations": [{**OPERATION, "name": "op3"}]},
    ("POST", "/import/openapi"): {
        "document": {
            "openapi": "3.0.3",
            "info": {"title": "Sample", "version": "1"},
            "servers": [{"url": "https://sales.example"}],
            "paths": {"/orders": {"get": {"operationId": "listOrders", "responses": {}}}},
        }
    },
    ("POST", "/lint"): {"operations": [{**OPERATION, "name": "op4"}]},
}
# POST routes that only read (a body too big for a query string): viewers may call them.
READ_ONLY_POSTS = {("POST", "/lint")}
PATH_VALUES = {"name": "op", "slug": "ag", "version": "1", "key_id": None}
WORKSPACE_PREFIX = "/api/v1/workspaces/{workspace:str}"


def workspace_routes(app: Litestar) -> list[tuple[str, str]]:
    routes: list[tuple[str, str]] = []
    for route in app.routes:
        if isinstance(route, HTTPRoute) and route.path.startswith(WORKSPACE_PREFIX):
            for method in sorted(set(route.methods) - {"OPTIONS", "HEAD"}):
                routes.append((method, route.path.removeprefix(WORKSPACE_PREFIX)))
    return routes


async def seed_workspace_b(client: Client, admin: str) -> dict[str, str]:
    """Workspace b with a published operation and agent, a key and a secret."""
    h = auth(admin)
    for slug in ("a", "b"):
        assert (await client.post("/api/v1/workspaces", json={"slug": slug}, headers=h)).is_success
    base = "/api/v1/workspaces/b"
    op = await client.post(f"{base}/operations", json=OPERATION, headers=h)
    await client.post(f"{base}/operations/op/publish", headers=auth(admin, op.headers["etag"]))
    agent = await client.post(
        f"{base}/agents", json={"slug": "ag", "operations": ["op"]}, headers=h
    )
    await client.post(f"{base}/agents/ag/publish", headers=auth(admin, agent.headers["etag"]))
    key = await client.post(f"{base}/keys", json={"agent": "ag"}, headers=h)
    await client.put(f"{base}/secrets/S", json={"value": "v"}, headers=h)
    assert key.is_success
    return {
        "key_id": str(key.json()["id"]),
        "op_etag": op.headers["etag"],
        "agent_etag": agent.headers["etag"],
    }


def concrete(path: str, seeded: dict[str, str]) -> str:
    values = {**PATH_VALUES, "key_id": seeded["key_id"]}
    for name, value in values.items():
        for kind in ("str", "int"):
            path = path.replace(f"{{{name}:{kind}}}", str(value))
    assert "{" not in path, f"no sample value for a parameter of {path}"
    return "/api/v1/workspaces/b" + path


async def call(
    client: Client, method: str, route: str, token: str, seeded: dict[str, str]
) -> tuple[int, Any]:
    if method in ("POST", "PUT") and (method, route) not in SAMPLE_BODIES:
        has_body = route.endswith(("/publish", "/unpublish", "/rollback"))
        assert has_body, f"add a sample body for {method} {route} to SAMPLE_BODIES"
    etag = seeded["agent_etag"] if "/agents/" in route else seeded["op_etag"]
    response = await client.request(
        method,
        concrete(route, seeded),
        json=SAMPLE_BODIES.get((method, route)),
        headers=auth(token, etag),
    )
    body = response.json() if response.content else None
    return response.status_code, body


def state_of(database_url: str) -> tuple[Any, ...]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT (SELECT version FROM catalog_state), (SELECT count(*) FROM audit_log),"
            " (SELECT count(*) FROM api_keys WHERE revoked_at IS NULL),"
            " (SELECT sum(revision) FROM operations), (SELECT sum(revision) FROM agents)"
        ).fetchone()
    assert row is not None
    return tuple(row)


async def test_routes_are_enumerated(app: Litestar) -> None:
    assert len(workspace_routes(app)) >= 20


async def test_token_of_another_workspace_gets_404_on_every_route_and_changes_nothing(
    client: Client, app: Litestar, admin_token: str, database_url: str
) -> None:
    seeded = await seed_workspace_b(client, admin_token)
    owner_of_a = await make_token(database_url, "owner", "a")
    before = state_of(database_url)
    for method, route in workspace_routes(app):
        status, body = await call(client, method, route, owner_of_a, seeded)
        assert (status, body and body.get("code")) == (404, "not_found"), (method, route, body)
    assert state_of(database_url) == before


@pytest.mark.parametrize("role", ["viewer"])
async def test_viewer_reads_every_route_but_writes_none(
    client: Client, app: Litestar, admin_token: str, database_url: str, role: str
) -> None:
    seeded = await seed_workspace_b(client, admin_token)
    viewer = await make_token(database_url, role, "b")
    before = state_of(database_url)
    for method, route in workspace_routes(app):
        status, body = await call(client, method, route, viewer, seeded)
        if method == "GET" or (method, route) in READ_ONLY_POSTS:
            assert status == 200, (method, route, body)
        else:
            assert (status, body["code"]) == (403, "forbidden"), (method, route, body)
    assert state_of(database_url) == before


# Routes that change API keys: creating, revoking, and deleting an agent (its keys go with it).
OWNER_ONLY = {
    ("POST", "/keys"),
    ("DELETE", "/keys/{key_id:int}"),
    ("DELETE", "/agents/{slug:str}"),
}


async def test_editor_gets_403_on_every_route_that_changes_keys_and_changes_nothing(
    client: Client, app: Litestar, admin_token: str, database_url: str
) -> None:
    assert set(workspace_routes(app)) >= OWNER_ONLY
    seeded = await seed_workspace_b(client, admin_token)
    editor = await make_token(database_url, "editor", "b")
    before = state_of(database_url)
    for method, route in sorted(OWNER_ONLY):
        status, body = await call(client, method, route, editor, seeded)
        assert (status, body["code"]) == (403, "forbidden"), (method, route, body)
    assert state_of(database_url) == before
