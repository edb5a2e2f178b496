"""tools/list paging (docs/architecture.md, "Tools/list paging") in both eras, with
``CRANK_MCP_TOOLS_PAGE_SIZE=2`` and five published tools."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.settings import SettingsError, load_settings
from tests.support.api import Client, auth
from tests.support.gateway import FRANKFURTER, SEED_URL_PATH, run_gateway, seed_catalog, wait_until
from tests.support.mcp import bearer, modern, open_session, request

BASE = "/api/v1/workspaces/default"
# Bound in this order on purpose: neither alphabetical nor the order of creation.
BOUND = ["rate_echo", "rate_alpha", "rate_delta", "rate_bravo", "rate_charlie"]


async def bind_and_publish(client: Client, admin: str, operations: list[str]) -> None:
    agent = await client.get(f"{BASE}/agents/currency-rates", headers=auth(admin))
    updated = await client.put(
        f"{BASE}/agents/currency-rates",
        json={**agent.json()["draft"], "operations": operations},
        headers=auth(admin, agent.headers["etag"]),
    )
    assert updated.is_success, updated.text
    published = await client.post(
        f"{BASE}/agents/currency-rates/publish", headers=auth(admin, updated.headers["etag"])
    )
    assert published.is_success, published.text


@pytest.fixture
async def setup(client: Client, admin_token: str, database_url: str, tmp_path: Path) -> Any:
    catalog = await seed_catalog(client, admin_token)
    for name in sorted(BOUND):
        op = await client.post(
            f"{BASE}/operations", json={**FRANKFURTER, "name": name}, headers=auth(admin_token)
        )
        assert op.is_success, op.text
        published = await client.post(
            f"{BASE}/operations/{name}/publish", headers=auth(admin_token, op.headers["etag"])
        )
        assert published.is_success, published.text
    await bind_and_publish(client, admin_token, BOUND)
    env = {"CRANK_MCP_TOOLS_PAGE_SIZE": "2"}
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as http,
    ):
        yield catalog, http


def tools_list(cursor: Any = None) -> dict[str, Any]:
    params = {} if cursor is None else {"cursor": cursor}
    return {"jsonrpc": "2.0", "id": 3, "method": "tools/list", "params": params}


async def legacy_pages(http: httpx.AsyncClient, headers: dict[str, str]) -> list[dict[str, Any]]:
    """Every page, following nextCursor from the first."""
    pages: list[dict[str, Any]] = []
    cursor = None
    while True:
        response = await http.post(SEED_URL_PATH, json=tools_list(cursor), headers=headers)
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        pages.append(result)
        cursor = result.get("nextCursor")
        if cursor is None:
            return pages
        assert len(pages) < 10, "nextCursor never ends"


async def test_legacy_tools_list_pages_follow_the_bound_order_and_are_stable(setup: Any) -> None:
    catalog, http = setup
    headers = {
        **bearer(catalog.agent_key),
        "MCP-Session-Id": await open_session(http, catalog.agent_key),
    }
    pages = await legacy_pages(http, headers)
    assert [[tool["name"] for tool in page["tools"]] for page in pages] == [
        BOUND[0:2],
        BOUND[2:4],
        BOUND[4:5],
    ]
    assert all(isinstance(page["nextCursor"], str) for page in pages[:-1])
    assert "nextCursor" not in pages[-1]
    assert all("resultType" not in page for page in pages)  # a 2025 result
    # The same list again: the same pages and the same cursors.
    assert await legacy_pages(http, headers) == pages


@pytest.mark.parametrize(
    "cursor",
    [
        pytest.param("not-a-cursor", id="garbage"),
        pytest.param(base64.urlsafe_b64encode(b"1:000000000000").decode(), id="another-list"),
        pytest.param(42, id="not-a-string"),
    ],
)
async def test_legacy_bad_cursor_is_minus_32602_in_http_200(setup: Any, cursor: Any) -> None:
    catalog, http = setup
    headers = {
        **bearer(catalog.agent_key),
        "MCP-Session-Id": await open_session(http, catalog.agent_key),
    }
    response = await http.post(SEED_URL_PATH, json=tools_list(cursor), headers=headers)
    assert response.status_code == 200
    assert response.json()["error"]["code"] == -32602
    assert response.json()["id"] == 3


async def test_modern_tools_list_pages_and_bad_cursor_is_http_400(setup: Any) -> None:
    catalog, http = setup
    headers = modern(catalog.agent_key, "tools/list")
    names: list[list[str]] = []
    cursor = None
    while True:
        params: dict[str, Any] = {} if cursor is None else {"cursor": cursor}
        response = await http.post(
            SEED_URL_PATH, json=request("tools/list", params), headers=headers
        )
        assert response.status_code == 200, response.text
        result = response.json()["result"]
        assert (result["resultType"], result["cacheScope"]) == ("complete", "private")
        names.append([tool["name"] for tool in result["tools"]])
        cursor = result.get("nextCursor")
        if cursor is None:
            break
        assert len(names) < 10, "nextCursor never ends"
    assert names == [BOUND[0:2], BOUND[2:4], BOUND[4:5]]

    bad = await http.post(
        SEED_URL_PATH, json=request("tools/list", {"cursor": "not-a-cursor"}), headers=headers
    )
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, -32602)
    assert bad.json()["id"] == 7


async def test_a_cursor_issued_before_the_list_changed_is_refused(
    setup: Any, client: Client, admin_token: str
) -> None:
    catalog, http = setup
    headers = {
        **bearer(catalog.agent_key),
        "MCP-Session-Id": await open_session(http, catalog.agent_key),
    }
    first = (await http.post(SEED_URL_PATH, json=tools_list(), headers=headers)).json()["result"]
    stale = first["nextCursor"]
    # The same five tools in another order: page 2 would now repeat or skip tools.
    await bind_and_publish(client, admin_token, list(reversed(BOUND)))

    async def reordered() -> bool:
        response = await http.post(SEED_URL_PATH, json=tools_list(), headers=headers)
        return [tool["name"] for tool in response.json()["result"]["tools"]] == list(
            reversed(BOUND)
        )[:2]

    await wait_until(reordered, timeout_s=10)
    response = await http.post(SEED_URL_PATH, json=tools_list(stale), headers=headers)
    assert (response.status_code, response.json()["error"]["code"]) == (200, -32602)
    pages = await legacy_pages(http, headers)
    assert [tool["name"] for page in pages for tool in page["tools"]] == list(reversed(BOUND))


@pytest.mark.parametrize(("value", "expected"), [(None, 500), ("1", 1), ("10000", 10_000)])
def test_tools_page_size_defaults_to_500_and_accepts_1_to_10000(
    value: str | None, expected: int
) -> None:
    environ = {} if value is None else {"CRANK_MCP_TOOLS_PAGE_SIZE": value}
    assert load_settings(environ).mcp_tools_page_size == expected


@pytest.mark.parametrize("value", ["0", "10001", "-3", "many"])
def test_tools_page_size_outside_1_to_10000_is_a_clear_error(value: str) -> None:
    with pytest.raises(SettingsError, match="CRANK_MCP_TOOLS_PAGE_SIZE"):
        load_settings({"CRANK_MCP_TOOLS_PAGE_SIZE": value})
