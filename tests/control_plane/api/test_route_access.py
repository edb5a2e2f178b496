"""Every workspace route, enumerated from the app itself: another workspace's
token gets 404, a viewer cannot write, and every admin route declares who may
call it (an app with a route that does not, does not start). A new route
without a sample body here fails the test, so no route escapes these checks."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from litestar import Litestar, Request, Router, get, post
from litestar.exceptions import ImproperlyConfiguredException
from litestar.handlers import BaseRouteHandler
from litestar.params import FromPath, JSONBody
from litestar.routes import HTTPRoute

from control_plane.access import (
    ANY_CALLER,
    INSTANCE_ADMIN,
    Access,
    check_declared_access,
    declared_access,
    dependency_names,
)
from control_plane.admission import admit
from control_plane.app import API_PREFIX, SCHEMA_PATH
from control_plane.auth import Role
from control_plane.deps import Caller, CurrentWorkspace, dependencies
from control_plane.request_body import BodyLimit
from shared.db import Connection
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
    ("PUT", "/egress/hosts"): {"hosts": ["api.example.com"]},
    ("PUT", "/egress/grants"): {"grants": ["10.0.0.5:8080"]},
    ("POST", "/agents/{agent:str}/webhooks"): {"url": "https://hooks.example.com/crank"},
    ("POST", "/identity-providers"): {"name": "idp2", "issuer": "https://id2.example.com"},
    ("PUT", "/identity-providers/{provider:str}"): {
        "name": "idp",
        "issuer": "https://id.example.com/v2",
    },
}
# POST routes that only read (a body too big for a query string): viewers may call them.
READ_ONLY_POSTS = {("POST", "/lint")}
PATH_VALUES = {
    "name": "op",
    "slug": "ag",
    "agent": "ag",
    "version": "1",
    "key_id": None,
    "webhook_id": None,
    "provider": "idp",
}
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
    provider = await client.post(
        f"{base}/identity-providers",
        json={"name": "idp", "issuer": "https://id.example.com"},
        headers=h,
    )
    assert provider.is_success
    hook = await client.post(
        f"{base}/agents/ag/webhooks", json={"url": "https://hooks.example.com/b"}, headers=h
    )
    assert key.is_success
    assert hook.is_success
    return {
        "key_id": str(key.json()["id"]),
        "webhook_id": hook.json()["id"],
        "op_etag": op.headers["etag"],
        "agent_etag": agent.headers["etag"],
    }


def concrete(path: str, seeded: dict[str, str]) -> str:
    values = {**PATH_VALUES, "key_id": seeded["key_id"], "webhook_id": seeded["webhook_id"]}
    for name, value in values.items():
        for kind in ("str", "int"):
            path = path.replace(f"{{{name}:{kind}}}", str(value))
    assert "{" not in path, f"no sample value for a parameter of {path}"
    return "/api/v1/workspaces/b" + path


async def call(
    client: Client,
    method: str,
    route: str,
    token: str | None,
    seeded: dict[str, str],
    *,
    if_match: bool = True,
) -> tuple[int, Any]:
    """Call the route with its sample body; ``token`` None sends no Authorization."""
    if method in ("POST", "PUT") and (method, route) not in SAMPLE_BODIES:
        has_body = route.endswith(("/publish", "/unpublish", "/rollback"))
        assert has_body, f"add a sample body for {method} {route} to SAMPLE_BODIES"
    etag = seeded["agent_etag"] if "/agents/" in route else seeded["op_etag"]
    headers = {} if token is None else auth(token, etag if if_match else None)
    response = await client.request(
        method,
        concrete(route, seeded),
        json=SAMPLE_BODIES.get((method, route)),
        headers=headers,
    )
    body = response.json() if response.content else None
    return response.status_code, body


def state_of(database_url: str) -> tuple[Any, ...]:
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT (SELECT version FROM catalog_state), (SELECT count(*) FROM audit_log),"
            " (SELECT count(*) FROM api_keys WHERE revoked_at IS NULL),"
            " (SELECT sum(revision) FROM operations), (SELECT sum(revision) FROM agents),"
            " (SELECT sum(egress_revision) FROM workspaces),"
            " (SELECT count(*) FROM webhook_subscriptions WHERE revoked_at IS NULL),"
            " (SELECT count(*) FROM identity_providers),"
            " (SELECT sum(revision) FROM identity_providers)"
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


# Routes that change API keys: creating, revoking, and deleting an agent (its keys go
# with it); the workspace's egress host list; and whose tokens it trusts.
OWNER_ONLY = {
    ("POST", "/keys"),
    ("DELETE", "/keys/{key_id:int}"),
    ("DELETE", "/agents/{slug:str}"),
    ("PUT", "/egress/hosts"),
    ("POST", "/identity-providers"),
    ("PUT", "/identity-providers/{provider:str}"),
    ("DELETE", "/identity-providers/{provider:str}"),
}
# A workspace's private egress grants: an owner must not open a host the operator
# allowlisted for another tenant.
INSTANCE_ADMIN_ONLY = {("PUT", "/egress/grants")}


@pytest.mark.parametrize(
    ("role", "routes"),
    [("editor", OWNER_ONLY), ("owner", INSTANCE_ADMIN_ONLY)],
    ids=["editor-on-owner-routes", "owner-on-instance-admin-routes"],
)
async def test_a_role_just_below_a_route_gets_403_and_changes_nothing(
    client: Client,
    app: Litestar,
    admin_token: str,
    database_url: str,
    role: str,
    routes: set[tuple[str, str]],
) -> None:
    assert set(workspace_routes(app)) >= routes
    seeded = await seed_workspace_b(client, admin_token)
    token = await make_token(database_url, role, "b")
    before = state_of(database_url)
    for method, route in sorted(routes):
        status, body = await call(client, method, route, token, seeded)
        assert (status, body["code"]) == (403, "forbidden"), (method, route, body)
    assert state_of(database_url) == before


def api_handlers(app: Litestar) -> dict[tuple[str, str], BaseRouteHandler]:
    """Every admin API handler by (method, path below the API prefix), schema routes excepted."""
    handlers: dict[tuple[str, str], BaseRouteHandler] = {}
    for route in app.routes:
        if not isinstance(route, HTTPRoute) or not route.path.startswith(f"{API_PREFIX}/"):
            continue
        if route.path.startswith(SCHEMA_PATH):
            continue
        for handler in route.route_handlers:
            for method in set(handler.http_methods) - {"OPTIONS"}:
                handlers[(method, route.path.removeprefix(API_PREFIX))] = handler
    return handlers


def expected_role(method: str, route: str) -> Role:
    if (method, route) in INSTANCE_ADMIN_ONLY:
        return Role.INSTANCE_ADMIN
    if (method, route) in OWNER_ONLY:
        return Role.OWNER
    if method == "GET" or (method, route) in READ_ONLY_POSTS:
        return Role.VIEWER
    return Role.EDITOR


OUTSIDE_WORKSPACES: dict[tuple[str, str], Access] = {
    ("GET", "/me"): ANY_CALLER,
    ("GET", "/workspaces"): ANY_CALLER,
    ("POST", "/workspaces"): INSTANCE_ADMIN,
    ("POST", "/secrets/rotate-key"): INSTANCE_ADMIN,
}


async def test_every_admin_route_declares_the_access_the_docs_give_it(app: Litestar) -> None:
    declared = {key: declared_access(handler) for key, handler in api_handlers(app).items()}
    expected: dict[tuple[str, str], Role | Access] = {
        **OUTSIDE_WORKSPACES,
        ("GET", "/workspaces/{workspace:str}"): Role.VIEWER,
        **{
            (method, WORKSPACE_PREFIX.removeprefix(API_PREFIX) + route): expected_role(
                method, route
            )
            for method, route in workspace_routes(app)
        },
    }
    assert declared == expected


async def test_every_workspace_route_resolves_its_workspace_through_the_role_check(
    app: Litestar,
) -> None:
    for (method, route), handler in api_handlers(app).items():
        if "{workspace:str}" in route:
            assert "ws" in dependency_names(handler), (method, route)


def if_match_routes(app: Litestar) -> list[tuple[str, str]]:
    handlers = api_handlers(app)
    prefix = WORKSPACE_PREFIX.removeprefix(API_PREFIX)
    return [
        (method, route)
        for method, route in workspace_routes(app)
        if "if_match" in dependency_names(handlers[(method, prefix + route)])
    ]


async def test_writes_answer_401_then_404_then_403_before_428_for_a_missing_if_match(
    client: Client, app: Litestar, admin_token: str, database_url: str
) -> None:
    routes = if_match_routes(app)
    assert len(routes) == 12  # identity providers: replace, delete
    seeded = await seed_workspace_b(client, admin_token)
    owner_of_a = await make_token(database_url, "owner", "a")
    viewer = await make_token(database_url, "viewer", "b")
    owner = await make_token(database_url, "owner", "b")
    before = state_of(database_url)
    for method, route in routes:
        allowed = admin_token if (method, route) in INSTANCE_ADMIN_ONLY else owner
        answers = [
            await call(client, method, route, token, seeded, if_match=False)
            for token in (None, owner_of_a, viewer, allowed)
        ]
        codes = [(status, body["code"]) for status, body in answers]
        assert codes == [
            (401, "unauthorized"),
            (404, "not_found"),
            (403, "forbidden"),
            (428, "if_match_required"),
        ], (method, route)
    assert state_of(database_url) == before


def start(*handlers: BaseRouteHandler) -> None:
    """Build an app with ``handlers`` under the API prefix and run the start-up check."""
    api = Router(API_PREFIX, route_handlers=list(handlers))
    app = Litestar(
        route_handlers=[api],
        dependencies=dependencies,
        before_request=admit,
        signature_namespace={"Connection": Connection},
    )
    check_declared_access(app.routes, under=API_PREFIX, public=(SCHEMA_PATH,), admission=admit)


@get("/workspaces/{workspace:str}/things", access=Role.VIEWER, sync_to_thread=False)
def declared_workspace_route(ws: CurrentWorkspace) -> str:
    return ws.slug


@get("/workspaces/{workspace:str}/things", sync_to_thread=False)
def undeclared_workspace_route(ws: CurrentWorkspace) -> str:
    return ws.slug


@get("/workspaces/{workspace:str}/things", access=Role.VIEWER, sync_to_thread=False)
def unchecked_workspace_route(workspace: FromPath[str]) -> str:
    return workspace


@get("/workspaces/{workspace:str}/things", access=ANY_CALLER, sync_to_thread=False)
def workspace_route_for_any_caller(ws: CurrentWorkspace) -> str:
    return ws.slug


@get("/things", access=Role.EDITOR, sync_to_thread=False)
def role_outside_workspaces(principal: Caller) -> str:
    return principal.name


@get("/things", access=ANY_CALLER, sync_to_thread=False)
def unauthenticated_route() -> str:
    return "anyone"


async def skip_admission(_request: Request[Any, Any, Any]) -> None:
    return None


@get(
    "/workspaces/{workspace:str}/things",
    access=Role.VIEWER,
    before_request=skip_admission,
    sync_to_thread=False,
)
def route_that_skips_admission(ws: CurrentWorkspace) -> str:
    return ws.slug


def document_route(access: Role) -> BaseRouteHandler:
    """A route that takes a document-sized body from ``access`` and up."""

    @post(
        "/workspaces/{workspace:str}/things",
        access=access,
        body_limit=BodyLimit.DOCUMENT,
        sync_to_thread=False,
    )
    def take_document(ws: CurrentWorkspace, data: JSONBody[dict[str, Any]]) -> str:
        return ws.slug

    return take_document


def test_an_app_whose_routes_declare_and_enforce_their_access_starts() -> None:
    start(declared_workspace_route)
    start(document_route(Role.EDITOR))


@pytest.mark.parametrize(
    "handler",
    [
        undeclared_workspace_route,
        unchecked_workspace_route,
        workspace_route_for_any_caller,
        role_outside_workspaces,
        unauthenticated_route,
        route_that_skips_admission,
        document_route(Role.VIEWER),
    ],
)
def test_an_app_with_a_route_whose_access_is_undeclared_or_unenforced_does_not_start(
    handler: BaseRouteHandler,
) -> None:
    with pytest.raises(ImproperlyConfiguredException):
        start(handler)
