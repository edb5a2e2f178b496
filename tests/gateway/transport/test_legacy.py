"""The legacy era (2025-03-26, 2025-06-18, 2025-11-25) over real HTTP, one
gateway process per test, and the status table of docs/architecture.md, "Status precedence"."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api import Client
from tests.support.gateway import SEED_URL_PATH, run_gateway, seed_catalog
from tests.support.mcp import INIT, TOOLS_LIST, bearer, open_session


@pytest.fixture
async def setup(client: Client, admin_token: str, database_url: str, tmp_path: Path) -> Any:
    catalog = await seed_catalog(client, admin_token)
    async with (
        run_gateway(database_url, tmp_path) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as http,
    ):
        yield catalog, gateway, http


async def test_seed_curl_lines_work_verbatim(setup: Any) -> None:
    catalog, _, http = setup
    # The seed's initialize line: both media types accepted, JSON chosen.
    init = await http.post(
        SEED_URL_PATH,
        content=json.dumps(INIT, indent=2).encode(),
        headers={
            "Authorization": f"Bearer {catalog.agent_key}",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    assert init.status_code == 200
    assert init.json()["result"]["protocolVersion"] == "2025-06-18"
    session_id = init.headers["mcp-session-id"]
    assert all(0x21 <= ord(c) <= 0x7E for c in session_id)
    # The seed's tools/list line: Accept application/json only, no notifications/initialized,
    # no MCP-Protocol-Version.
    listed = await http.post(
        SEED_URL_PATH,
        content=json.dumps(TOOLS_LIST).encode(),
        headers={
            "Authorization": f"Bearer {catalog.agent_key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
            "MCP-Session-Id": session_id,
        },
    )
    assert listed.status_code == 200
    assert listed.headers["content-type"] == "application/json"
    tools = listed.json()["result"]["tools"]
    assert [t["name"] for t in tools] == ["frankfurter_latest_rate"]
    assert tools[0]["annotations"]["readOnlyHint"] is True


async def test_path_without_mcp_prefix_serves_the_same_endpoint(setup: Any) -> None:
    catalog, _, http = setup
    response = await http.post(
        "/v1/default/currency-rates", json=INIT, headers=bearer(catalog.agent_key)
    )
    assert response.status_code == 200


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("no key", 401),
        ("wrong key", 401),
        ("unknown agent", 404),
        ("unpublished agent", 404),
        ("unknown workspace", 404),
        ("approval key", 403),
        ("key of another agent", 403),
        ("foreign origin", 403),
    ],
)
async def test_status_table_for_initialize(setup: Any, case: str, status: int) -> None:
    catalog, _, http = setup
    path, headers = SEED_URL_PATH, bearer(catalog.agent_key)
    if case == "no key":
        headers.pop("Authorization")
    elif case == "wrong key":
        headers = bearer("crk_agent_" + "A" * 49)
    elif case == "unknown agent":
        path = "/mcp/v1/default/nobody"
    elif case == "unpublished agent":
        path = "/mcp/v1/default/unpublished"
    elif case == "unknown workspace":
        path = "/mcp/v1/elsewhere/currency-rates"
    elif case == "approval key":
        headers = bearer(catalog.approval_key)
    elif case == "key of another agent":
        headers = bearer(catalog.other_key)
    elif case == "foreign origin":
        headers["Origin"] = "https://evil.example"
    response = await http.post(path, json=INIT, headers=headers)
    assert response.status_code == status, response.text
    if status == 401:
        assert response.headers["www-authenticate"] == "Bearer"


async def test_valid_key_of_unpublished_agent_is_404_not_403(setup: Any, database_url: str) -> None:
    """The gateway knows keys of unpublished agents, and says "not published"."""
    catalog, _, http = setup
    import psycopg

    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM api_keys k JOIN agents a ON a.id = k.agent_id WHERE a.slug = 'unpublished'"
        ).fetchone()
    assert row is not None
    assert row[0] == 1
    response = await http.post(
        "/mcp/v1/default/unpublished", json=INIT, headers=bearer(catalog.agent_key)
    )
    assert response.status_code == 404


async def test_session_rules(setup: Any) -> None:
    catalog, _, http = setup
    session_id = await open_session(http, catalog.agent_key)
    headers = bearer(catalog.agent_key)

    missing = await http.post(SEED_URL_PATH, json=TOOLS_LIST, headers=headers)
    assert missing.status_code == 400
    malformed = await http.post(
        SEED_URL_PATH, json=TOOLS_LIST, headers={**headers, "MCP-Session-Id": "bad id"}
    )
    assert malformed.status_code == 400
    unknown = await http.post(
        SEED_URL_PATH, json=TOOLS_LIST, headers={**headers, "MCP-Session-Id": "crs1.AAAA.BBBB"}
    )
    assert unknown.status_code == 404
    forged = session_id[:-2] + ("AA" if not session_id.endswith("AA") else "BB")
    assert (
        await http.post(
            SEED_URL_PATH, json=TOOLS_LIST, headers={**headers, "MCP-Session-Id": forged}
        )
    ).status_code == 404
    other_key = await http.post(
        "/mcp/v1/default/other",
        json=TOOLS_LIST,
        headers={**bearer(catalog.other_key), "MCP-Session-Id": session_id},
    )
    assert other_key.status_code == 404

    in_session = {**headers, "MCP-Session-Id": session_id}
    mismatch = await http.post(
        SEED_URL_PATH, json=TOOLS_LIST, headers={**in_session, "MCP-Protocol-Version": "2025-11-25"}
    )
    assert mismatch.status_code == 400
    same = await http.post(
        SEED_URL_PATH, json=TOOLS_LIST, headers={**in_session, "MCP-Protocol-Version": "2025-06-18"}
    )
    assert same.status_code == 200

    initialized = await http.post(
        SEED_URL_PATH,
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers=in_session,
    )
    assert initialized.status_code == 202
    ping = await http.post(
        SEED_URL_PATH, json={"jsonrpc": "2.0", "id": 9, "method": "ping"}, headers=in_session
    )
    assert ping.json() == {"jsonrpc": "2.0", "id": 9, "result": {}}

    ended = await http.delete(SEED_URL_PATH, headers=in_session)
    assert ended.status_code == 204
    after = await http.post(SEED_URL_PATH, json=TOOLS_LIST, headers=in_session)
    assert after.status_code == 404


async def test_json_rpc_errors(setup: Any) -> None:
    catalog, _, http = setup
    session_id = await open_session(http, catalog.agent_key)
    headers = {**bearer(catalog.agent_key), "MCP-Session-Id": session_id}

    parse = await http.post(SEED_URL_PATH, content=b"{nope", headers=headers)
    assert (parse.status_code, parse.json()["error"]["code"]) == (400, -32700)
    invalid = await http.post(SEED_URL_PATH, json={"id": 1, "method": "ping"}, headers=headers)
    assert (invalid.status_code, invalid.json()["error"]["code"]) == (400, -32600)
    unknown_tool = await http.post(
        SEED_URL_PATH,
        json={
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "nope", "arguments": {}},
        },
        headers=headers,
    )
    assert (unknown_tool.status_code, unknown_tool.json()["error"]["code"]) == (200, -32602)
    unknown_method = await http.post(
        SEED_URL_PATH, json={"jsonrpc": "2.0", "id": 4, "method": "nope/nope"}, headers=headers
    )
    assert (unknown_method.status_code, unknown_method.json()["error"]["code"]) == (200, -32601)
    batch = await http.post(SEED_URL_PATH, json=[TOOLS_LIST], headers=headers)
    assert batch.status_code == 400  # batches only in 2025-03-26
    bad_accept = await http.post(
        SEED_URL_PATH, json=TOOLS_LIST, headers={**headers, "Accept": "text/html"}
    )
    assert bad_accept.status_code == 400
    bad_type = await http.post(
        SEED_URL_PATH, content=b"{}", headers={**headers, "Content-Type": "text/plain"}
    )
    assert bad_type.status_code == 400


async def test_batches_work_in_2025_03_26(setup: Any) -> None:
    catalog, _, http = setup
    session_id = await open_session(http, catalog.agent_key, "2025-03-26")
    headers = {**bearer(catalog.agent_key), "MCP-Session-Id": session_id}
    response = await http.post(
        SEED_URL_PATH,
        json=[
            TOOLS_LIST,
            {"jsonrpc": "2.0", "id": 5, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
        ],
        headers=headers,
    )
    assert response.status_code == 200
    assert [item["id"] for item in response.json()] == [2, 5]


async def test_unsupported_initialize_version_negotiates_the_latest(setup: Any) -> None:
    catalog, _, http = setup
    body = {**INIT, "params": {**INIT["params"], "protocolVersion": "1999-01-01"}}  # type: ignore[dict-item]
    response = await http.post(SEED_URL_PATH, json=body, headers=bearer(catalog.agent_key))
    assert response.json()["result"]["protocolVersion"] == "2025-11-25"


async def test_sse_answer_when_client_accepts_only_event_streams(setup: Any) -> None:
    catalog, _, http = setup
    response = await http.post(
        SEED_URL_PATH,
        json=INIT,
        headers={**bearer(catalog.agent_key), "Accept": "text/event-stream"},
    )
    assert response.headers["content-type"] == "text/event-stream"
    data = [line for line in response.text.splitlines() if line.startswith("data: ")]
    assert json.loads(data[0][6:])["result"]["protocolVersion"] == "2025-06-18"


async def test_health_ready_and_metrics(setup: Any) -> None:
    catalog, gateway, http = setup
    await open_session(http, catalog.agent_key)
    assert (await http.get("/healthz")).status_code == 200
    ready = (await http.get("/readyz")).json()
    assert ready["status"] == "ready"
    assert ready["snapshot_version"] > 1
    async with httpx.AsyncClient() as plain:
        metrics = (await plain.get(f"http://127.0.0.1:{gateway.metrics_port}/metrics")).text
    assert 'crank_mcp_requests_total{method="initialize",status="200"}' in metrics
    assert "crank_snapshot_version" in metrics
    assert catalog.agent_key not in gateway.log()


async def test_key_use_is_recorded_in_batches_at_minute_granularity(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    import psycopg

    catalog = await seed_catalog(client, admin_token)
    async with (
        run_gateway(database_url, tmp_path) as gateway,
        httpx.AsyncClient(base_url=gateway.url) as http,
    ):
        await open_session(http, catalog.agent_key)
    # The gateway flushes its batch when it stops (SIGTERM above).
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT last_used_at, date_trunc('minute', last_used_at) = last_used_at "
            "FROM api_keys k JOIN agents a ON a.id = k.agent_id "
            "WHERE a.slug = 'currency-rates' AND k.kind = 'agent'"
        ).fetchone()
    assert row is not None
    assert row[0] is not None
    assert row[1] is True
