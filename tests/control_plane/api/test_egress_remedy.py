"""A try-it refused by the egress layers says, to the admin, exactly what to change
(``result.remedy``), while the tool error the model would get stays generic; and the
loopback switch ``crank up`` sets opens loopback upstreams without a grant.

The upstream is a JSON server on 127.0.0.1, started by the test; each control plane
here differs only in its operator settings.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from control_plane.app import create_app
from shared.settings import Settings
from tests.support.api import Client, auth, grant_egress, make_token
from tests.support.db import TEST_SECRET_KEY
from tests.support.threaded_http import JsonHandler, ThreadedServer, serve_threaded

GENERIC_ACTION = "Tell the user that the administrator must allow this upstream."


@pytest.fixture
def upstream() -> Iterator[ThreadedServer]:
    with serve_threaded(JsonHandler) as server:
        yield server


@asynccontextmanager
async def control_plane(database_url: str, **settings: Any) -> AsyncIterator[Client]:
    app = create_app(Settings(database_url=database_url, secret_key=TEST_SECRET_KEY, **settings))
    async with AsyncTestClient(app=app) as test_client:
        yield test_client


async def workspace_with_operation(client: Client, admin: str, port: int) -> None:
    created = await client.post("/api/v1/workspaces", json={"slug": "acme"}, headers=auth(admin))
    assert created.status_code == 201, created.text
    operation = {
        "name": "read_data",
        "description": "Reads the data. Use when the user asks for the data.",
        "input": {"type": "object", "properties": {}},
        "request": {"method": "GET", "url": f"http://127.0.0.1:{port}/data"},
        "response": {"select": "@"},
    }
    created = await client.post(
        "/api/v1/workspaces/acme/operations", json=operation, headers=auth(admin)
    )
    assert created.status_code == 201, created.text


async def try_read(client: Client, token: str) -> Any:
    response = await client.post(
        "/api/v1/workspaces/acme/operations/read_data/try", json={}, headers=auth(token)
    )
    assert response.status_code == 200, response.text
    return response.json()["result"]


def assert_refused_generically(result: Any) -> None:
    """The model's text names no setting, page or host: only the admin's remedy does."""
    assert result["is_error"] is True
    tool_error = result["structured_content"]
    assert tool_error["error_code"] == "upstream_blocked"
    assert tool_error["suggested_action"] == GENERIC_ACTION
    assert "CRANK_" not in tool_error["message"]
    assert "/ui/" not in tool_error["message"]


async def test_an_address_the_operator_has_not_allowlisted_names_the_setting_and_the_grant(
    database_url: str, admin_token: str, upstream: ThreadedServer
) -> None:
    async with control_plane(database_url) as client:
        await workspace_with_operation(client, admin_token, upstream.port)
        result = await try_read(client, admin_token)
    assert_refused_generically(result)
    entry = f"127.0.0.1:{upstream.port}"
    assert set(result["details"]) == {"upstream_status", "attempts", "reason"}  # as before
    assert result["remedy"] == (
        f"{entry} is a private address (loopback) that the operator's "
        f"CRANK_UPSTREAM_ALLOWLIST does not include. The operator adds {entry} to "
        "CRANK_UPSTREAM_ALLOWLIST and restarts Crank; then an instance admin adds the grant "
        f"{entry} on the Egress page (/ui/w/acme/egress). On a developer's machine, "
        "CRANK_ALLOW_LOOPBACK_UPSTREAMS=true opens loopback to every workspace instead; "
        "`crank up` on loopback sets it."
    )
    assert upstream.hits == []


async def test_an_allowlisted_address_without_a_grant_names_the_grant_to_add(
    database_url: str, admin_token: str, upstream: ThreadedServer
) -> None:
    entry = f"127.0.0.1:{upstream.port}"
    async with control_plane(database_url, upstream_allowlist=(entry,)) as client:
        await workspace_with_operation(client, admin_token, upstream.port)
        refused = await try_read(client, admin_token)
        await grant_egress(client, admin_token, "acme", entry)
        granted = await try_read(client, admin_token)
    assert_refused_generically(refused)
    assert refused["remedy"] == (
        f"{entry} is a private address (loopback) the operator allows, but this workspace "
        f"has no grant for it. An instance admin adds the grant {entry} under Grants on "
        "the Egress page (/ui/w/acme/egress)."
    )
    assert granted["is_error"] is False
    assert granted["remedy"] is None
    assert upstream.hits == ["GET /data"]


async def test_a_host_off_the_workspaces_list_names_the_host_to_add(
    database_url: str, admin_token: str, upstream: ThreadedServer
) -> None:
    async with control_plane(database_url, allow_loopback_upstreams=True) as client:
        await workspace_with_operation(client, admin_token, upstream.port)
        base = "/api/v1/workspaces/acme/egress"
        etag = (await client.get(base, headers=auth(admin_token))).headers["etag"]
        narrowed = await client.put(
            f"{base}/hosts", json={"hosts": ["api.example.com"]}, headers=auth(admin_token, etag)
        )
        assert narrowed.status_code == 200, narrowed.text
        result = await try_read(client, admin_token)
    assert_refused_generically(result)
    assert result["remedy"] == (
        "127.0.0.1 is not on this workspace's host list. A workspace owner adds 127.0.0.1 "
        "under Hosts on the Egress page (/ui/w/acme/egress)."
    )
    assert upstream.hits == []


async def test_the_loopback_switch_reaches_loopback_without_a_grant(
    database_url: str, admin_token: str, upstream: ThreadedServer
) -> None:
    async with control_plane(database_url, allow_loopback_upstreams=True) as client:
        await workspace_with_operation(client, admin_token, upstream.port)
        result = await try_read(client, admin_token)
    assert result["is_error"] is False, result
    assert result["structured_content"] == {"method": "GET", "path": "/data"}
    assert upstream.hits == ["GET /data"]


async def test_the_remedy_is_in_russian_where_crank_speaks_russian(
    database_url: str, admin_token: str, upstream: ThreadedServer
) -> None:
    entry = f"127.0.0.1:{upstream.port}"
    settings = {"upstream_allowlist": (entry,), "language": "ru"}
    async with control_plane(database_url, **settings) as client:
        await workspace_with_operation(client, admin_token, upstream.port)
        result = await try_read(client, admin_token)
    assert result["remedy"].startswith(f"{entry} — частный адрес (loopback)")
    assert f"разрешение {entry} в разделе «Grants»" in result["remedy"]


@pytest.mark.parametrize("allowlisted", [True, False])
async def test_a_workspace_member_is_not_told_what_the_operator_allowlisted(
    database_url: str, admin_token: str, upstream: ThreadedServer, allowlisted: bool
) -> None:
    """Whether the operator allowlisted an address is the instance's configuration (it
    may be there for another tenant): an owner gets the same steps either way."""
    entry = f"127.0.0.1:{upstream.port}"
    allowlist = (entry,) if allowlisted else ()
    async with control_plane(database_url, upstream_allowlist=allowlist) as client:
        await workspace_with_operation(client, admin_token, upstream.port)
        owner = await make_token(database_url, "owner", "acme", name="olga")
        result = await try_read(client, owner)
    assert_refused_generically(result)
    assert result["remedy"] == (
        f"{entry} is a private address (loopback). This workspace reaches it only once an "
        f"instance admin grants {entry} on the Egress page (/ui/w/acme/egress) and the "
        "operator's CRANK_UPSTREAM_ALLOWLIST includes it: ask an instance admin."
    )


async def test_an_openapi_import_from_a_refused_url_says_what_to_change(
    database_url: str, admin_token: str, upstream: ThreadedServer
) -> None:
    entry = f"127.0.0.1:{upstream.port}"
    async with control_plane(database_url, upstream_allowlist=(entry,)) as client:
        await workspace_with_operation(client, admin_token, upstream.port)
        response = await client.post(
            "/api/v1/workspaces/acme/import/openapi",
            json={"url": f"http://{entry}/openapi.json", "dry_run": True},
            headers=auth(admin_token),
        )
    assert (response.status_code, response.json()["code"]) == (400, "upstream_blocked")
    assert response.json()["message"].endswith(
        f"An instance admin adds the grant {entry} under Grants on the Egress page "
        "(/ui/w/acme/egress)."
    )
    assert upstream.hits == []
