"""``POST /api/v1/workspaces/{ws}/operations/{name}/try``: a draft against its upstream.

The upstream is an HTTP server on 127.0.0.1 (a thread of its own), allowlisted through the
control plane's own settings (``CRANK_UPSTREAM_ALLOWLIST``) and granted to the
workspace, so the app's executor and SSRF guard are the ones a deployment builds. The guard tests swap
in an executor with the same policy whose connect check records every
address it is asked for and lets only 127.0.0.1 be dialled: no packet leaves
this machine even if the guard were wrong.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psycopg
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from control_plane.app import create_app
from control_plane.services.try_it import MAX_BODY_BYTES
from control_plane.state import AppState
from shared.engine.outbound import UpstreamExecutor
from shared.settings import Settings
from tests.support.api import Client, auth, grant_egress, make_token
from tests.support.db import TEST_SECRET_KEY
from tests.support.sockets import LoopbackOnly
from tests.support.threaded_http import ThreadedServer, serve_threaded

TOKEN = "s3cr3t-upstream-token/with+odd=chars"
BASE = "/api/v1/workspaces/acme"


# A loopback API on a thread of its own (tests.support.threaded_http).
Upstream = ThreadedServer


class _Handler(BaseHTTPRequestHandler):
    server: ThreadedServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _answer(self, status: int, value: Any) -> None:
        raw = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.send_header("Set-Cookie", "session=upstream-session-cookie")
        self.end_headers()
        self.wfile.write(raw)

    def _handle(self) -> None:
        self.server.hits.append(f"{self.command} {self.path}")
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        url = urlsplit(self.path)
        if url.path == "/denied":
            self._answer(401, {"error": "bad token", "got": self.headers.get("Authorization")})
            return
        if url.path == "/big":
            self._answer(200, {"rows": ["x" * 100] * 1500, "auth": TOKEN})
            return
        # Echoes what it got, the Authorization header included.
        echo = {
            "authorization": self.headers.get("Authorization"),
            "query": dict(parse_qsl(url.query)),
            "body": body,
            "items": [{"n": n} for n in range(3)],
        }
        self._answer(201 if self.command == "POST" else 200, echo)

    do_GET = do_POST = do_DELETE = _handle


def serve() -> Iterator[Upstream]:
    with serve_threaded(_Handler) as server:
        yield server


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    yield from serve()


@pytest.fixture
def other_upstream() -> Iterator[Upstream]:
    """A loopback server that is *not* allowlisted."""
    yield from serve()


@pytest.fixture
def try_app(database_url: str, upstream: Upstream) -> Litestar:
    return create_app(
        Settings(
            database_url=database_url,
            secret_key=TEST_SECRET_KEY,
            upstream_allowlist=(f"127.0.0.1:{upstream.port}",),
        )
    )


@pytest.fixture
async def try_client(try_app: Litestar) -> AsyncIterator[Client]:
    async with AsyncTestClient(app=try_app) as test_client:
        yield test_client


def operation(port: int, name: str = "get_echo", **changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "description": "Gets the echo of a query. Use when the user asks for an echo.",
        "input": {
            "type": "object",
            "properties": {"q": {"type": "string", "description": "what to echo"}},
            "required": ["q"],
        },
        "request": {
            "method": "GET",
            "url": f"http://127.0.0.1:{port}/echo",
            "auth": {"type": "bearer", "secret": "UPSTREAM_TOKEN"},
        },
        "response": {"select": "{q: query.q, first: items[0]}"},
    }
    spec.update(changes)
    return spec


@pytest.fixture
async def admin(try_client: Client, admin_token: str, upstream: Upstream) -> str:
    """Workspace acme with the secret and operations get_echo, get_big and create_echo."""
    h = auth(admin_token)
    created = await try_client.post("/api/v1/workspaces", json={"slug": "acme"}, headers=h)
    assert created.status_code == 201, created.text
    secret = await try_client.put(
        f"{BASE}/secrets/UPSTREAM_TOKEN", json={"value": TOKEN}, headers=h
    )
    assert secret.is_success, secret.text
    await grant_egress(try_client, admin_token, "acme", f"127.0.0.1:{upstream.port}")
    big = operation(upstream.port, "get_big")
    big["request"] = {**big["request"], "url": f"http://127.0.0.1:{upstream.port}/big"}
    big["response"] = {"select": "rows"}
    post = operation(upstream.port, "create_echo")
    post["request"] = {**post["request"], "method": "POST"}
    post["response"] = {"select": "body"}
    for spec in (operation(upstream.port), big, post):
        response = await try_client.post(f"{BASE}/operations", json=spec, headers=h)
        assert response.status_code == 201, response.text
    return admin_token


async def create(client: Client, token: str, spec: dict[str, Any]) -> None:
    response = await client.post(f"{BASE}/operations", json=spec, headers=auth(token))
    assert response.status_code == 201, response.text


async def try_it(client: Client, token: str, name: str, **body: Any) -> Any:
    return await client.post(f"{BASE}/operations/{name}/try", json=body, headers=auth(token))


def audit_rows(database_url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url) as conn:
        return conn.execute(
            "SELECT action, resource_name, details FROM audit_log WHERE action = 'operation.try'"
        ).fetchall()


async def test_get_try_returns_request_upstream_and_selected_result(
    try_client: Client, admin: str, upstream: Upstream, database_url: str
) -> None:
    response = await try_it(try_client, admin, "get_echo", arguments={"q": "hello"})
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["request"]["method"] == "GET"
    assert report["request"]["url"] == f"http://127.0.0.1:{upstream.port}/echo?q=hello"
    assert report["upstream"]["status"] == 200
    assert report["upstream"]["attempts"] == 1
    assert report["result"] == {
        "is_error": False,
        "structured_content": {"q": "hello", "first": {"n": 0}},
        "truncated": False,
        "details": {},
        "remedy": None,
    }
    assert report["select"] == "{q: query.q, first: items[0]}"
    assert report["audited"] is True  # a GET can read what an internal host holds
    assert upstream.hits == ["GET /echo?q=hello"]
    ((action, name, details),) = audit_rows(database_url)
    assert (action, name, details["method"], details["outcome"]) == (
        "operation.try",
        "get_echo",
        "GET",
        "ok",
    )
    assert "hello" not in str(details)  # no argument value, so no URL


async def test_select_override_replaces_the_drafts_selection_for_this_try_only(
    try_client: Client, admin: str, upstream: Upstream
) -> None:
    response = await try_it(try_client, admin, "get_echo", arguments={"q": "x"}, select="items[].n")
    assert response.status_code == 200, response.text
    assert response.json()["result"]["structured_content"] == [0, 1, 2]
    assert response.json()["select"] == "items[].n"
    draft = await try_client.get(f"{BASE}/operations/get_echo", headers=auth(admin))
    assert draft.json()["draft"]["response"]["select"] == "{q: query.q, first: items[0]}"

    bad = await try_it(try_client, admin, "get_echo", arguments={"q": "x"}, select="items[")
    assert bad.status_code == 400
    assert bad.json()["code"] == "validation_failed"
    assert [e["field"] for e in bad.json()["errors"]] == ["select"]
    assert len(upstream.hits) == 1


async def test_secret_is_masked_in_the_request_the_raw_body_and_the_result(
    try_client: Client, admin: str, upstream: Upstream
) -> None:
    response = await try_it(try_client, admin, "get_echo", arguments={"q": "x"}, select="@")
    assert response.status_code == 200, response.text
    report = response.json()
    assert TOKEN not in response.text
    assert TOKEN.replace("/", "\\/") not in response.text
    assert ["Authorization", "Bearer ****"] in report["request"]["headers"]
    assert '"authorization": "Bearer ****"' in report["upstream"]["body"]
    assert report["result"]["structured_content"]["authorization"] == "Bearer ****"
    names = [name.lower() for name, _ in report["upstream"]["headers"]]
    assert "content-type" in names
    assert "set-cookie" not in names
    assert "upstream-session-cookie" not in response.text


async def test_upstream_error_is_the_tool_error_with_a_masked_excerpt_for_the_admin(
    try_client: Client, admin: str, upstream: Upstream
) -> None:
    spec = operation(upstream.port, "get_denied")
    spec["request"] = {**spec["request"], "url": f"http://127.0.0.1:{upstream.port}/denied"}
    await create(try_client, admin, spec)
    response = await try_it(try_client, admin, "get_denied", arguments={"q": "x"})
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["upstream"]["status"] == 401
    assert report["result"]["is_error"] is True
    assert report["result"]["structured_content"]["error_code"] == "upstream_auth_failed"
    assert report["result"]["details"]["upstream_status"] == 401
    assert "Bearer ****" in report["result"]["details"]["upstream_text"]
    assert TOKEN not in response.text


async def test_raw_body_is_capped_and_the_cut_is_reported(
    try_client: Client, admin: str, upstream: Upstream
) -> None:
    response = await try_it(try_client, admin, "get_big", arguments={"q": "x"})
    assert response.status_code == 200, response.text
    shown = response.json()["upstream"]
    assert shown["body_bytes"] > MAX_BODY_BYTES
    assert shown["body_truncated"] is True
    assert len(shown["body"].encode()) <= MAX_BODY_BYTES
    assert TOKEN not in response.text
    result = response.json()["result"]
    assert result["is_error"] is False
    assert result["truncated"] is True  # rows capped at max_items
    assert len(result["structured_content"]) == 50


async def test_invalid_arguments_are_the_tool_error_and_nothing_is_called(
    try_client: Client, admin: str, upstream: Upstream
) -> None:
    response = await try_it(try_client, admin, "get_echo", arguments={"q": 5})
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["request"] is None
    assert report["upstream"] is None
    assert report["result"]["is_error"] is True
    error = report["result"]["structured_content"]
    assert error["error_code"] == "invalid_arguments"
    assert error["request_id"].startswith("try_")
    assert report["result"]["details"]["errors"] == [{"field": "$.q", "rule": "type"}]
    assert upstream.hits == []


async def test_missing_secret_is_secret_missing_naming_it_for_the_admin(
    try_client: Client, admin: str, upstream: Upstream
) -> None:
    spec = operation(upstream.port, "get_unset")
    spec["request"] = {**spec["request"], "auth": {"type": "bearer", "secret": "NOT_SET"}}
    await create(try_client, admin, spec)
    response = await try_it(try_client, admin, "get_unset", arguments={"q": "x"})
    result = response.json()["result"]
    assert result["structured_content"]["error_code"] == "secret_missing"
    assert result["details"] == {"secret": "NOT_SET"}
    assert upstream.hits == []


def swap_executor(client: Client, app: Litestar) -> LoopbackOnly:
    """The app's executor, same policy, but every address to dial goes through ``LoopbackOnly``.

    Swapped on the app's own event loop (the test client's portal)."""
    state = app.state["crank"]
    assert isinstance(state, AppState)
    net = LoopbackOnly()

    async def swap() -> None:
        policy = state.executor.policy
        await state.executor.close()
        state.executor = UpstreamExecutor(policy, connect_check=net)
        await state.executor.start()  # the lifespan closes whatever executor the state holds

    client.blocking_portal.call(swap)
    return net


async def test_loopback_port_outside_the_allowlist_is_blocked_and_never_dialled(
    try_client: Client,
    try_app: Litestar,
    admin: str,
    upstream: Upstream,
    other_upstream: Upstream,
) -> None:
    net = swap_executor(try_client, try_app)
    await create(try_client, admin, operation(other_upstream.port, "get_other"))
    response = await try_it(try_client, admin, "get_other", arguments={"q": "x"})
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["upstream"]["status"] is None
    assert report["upstream"]["error_code"] == "upstream_blocked"
    assert report["result"]["structured_content"]["error_code"] == "upstream_blocked"
    assert net.addresses == []
    assert other_upstream.hits == []

    allowed = await try_it(try_client, admin, "get_echo", arguments={"q": "x"})
    assert allowed.json()["upstream"]["status"] == 200  # the swapped executor does connect
    assert net.addresses == ["127.0.0.1"]


async def test_cloud_metadata_address_is_blocked_before_any_socket(
    try_client: Client, try_app: Litestar, admin: str, upstream: Upstream
) -> None:
    net = swap_executor(try_client, try_app)
    spec = operation(upstream.port, "get_metadata")
    spec["request"] = {"method": "GET", "url": "http://169.254.169.254/latest/meta-data"}
    await create(try_client, admin, spec)
    response = await try_it(try_client, admin, "get_metadata", arguments={"q": "x"})
    assert response.status_code == 200, response.text
    assert response.json()["result"]["structured_content"]["error_code"] == "upstream_blocked"
    assert net.addresses == []


async def test_post_without_acknowledgement_is_400_and_calls_nothing(
    try_client: Client, admin: str, upstream: Upstream, database_url: str
) -> None:
    response = await try_it(try_client, admin, "create_echo", arguments={"q": "x"})
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "acknowledgement_required"
    assert [e["field"] for e in body["errors"]] == ["acknowledge_side_effects"]
    assert upstream.hits == []
    assert audit_rows(database_url) == []


async def test_post_with_acknowledgement_calls_for_real_and_is_audited(
    try_client: Client, admin: str, upstream: Upstream, database_url: str
) -> None:
    response = await try_it(
        try_client, admin, "create_echo", arguments={"q": "x"}, acknowledge_side_effects=True
    )
    assert response.status_code == 200, response.text
    report = response.json()
    assert report["upstream"]["status"] == 201
    assert report["result"]["structured_content"] == {"q": "x"}
    assert report["audited"] is True
    assert upstream.hits == ["POST /echo"]
    rows = audit_rows(database_url)
    assert len(rows) == 1
    action, name, details = rows[0]
    assert (action, name) == ("operation.try", "create_echo")
    assert details == {
        "method": "POST",
        "host": "127.0.0.1",
        "port": upstream.port,
        "revision": 1,
        "status": 201,
        "outcome": "ok",
        "attempts": 1,
    }
    assert TOKEN not in str(details)


async def test_viewer_gets_403_and_another_workspace_404_without_a_call(
    try_client: Client, admin: str, upstream: Upstream, database_url: str
) -> None:
    viewer = await make_token(database_url, "viewer", "acme")
    response = await try_it(try_client, viewer, "get_echo", arguments={"q": "x"})
    assert (response.status_code, response.json()["code"]) == (403, "forbidden")

    created = await try_client.post("/api/v1/workspaces", json={"slug": "b"}, headers=auth(admin))
    assert created.status_code == 201
    owner_of_b = await make_token(database_url, "owner", "b")
    response = await try_it(try_client, owner_of_b, "get_echo", arguments={"q": "x"})
    assert (response.status_code, response.json()["code"]) == (404, "not_found")

    missing = await try_it(try_client, admin, "no_such_operation", arguments={})
    assert (missing.status_code, missing.json()["code"]) == (404, "not_found")
    assert upstream.hits == []
