"""Two gateway processes on one database: sessions, DELETE, publishes, keys."""

from __future__ import annotations

from pathlib import Path

import httpx

from tests.support.api import Client, auth
from tests.support.gateway import SEED_URL_PATH, run_gateway, seed_catalog, wait_until
from tests.support.mcp import INIT, TOOLS_LIST, bearer, open_session

BASE = "/api/v1/workspaces/default"


async def tool_names(http: httpx.AsyncClient, key: str, session_id: str) -> list[str]:
    response = await http.post(
        SEED_URL_PATH, json=TOOLS_LIST, headers={**bearer(key), "MCP-Session-Id": session_id}
    )
    assert response.status_code == 200, response.text
    return [tool["name"] for tool in response.json()["result"]["tools"]]


async def test_session_opened_on_one_replica_works_and_ends_on_the_other(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    catalog = await seed_catalog(client, admin_token)
    # A long poll interval: only LISTEN can make the DELETE visible this fast.
    async with (
        run_gateway(database_url, tmp_path, refresh_ms=60_000) as first,
        run_gateway(database_url, tmp_path, refresh_ms=60_000) as second,
        httpx.AsyncClient(base_url=first.url) as one,
        httpx.AsyncClient(base_url=second.url) as two,
    ):
        session_id = await open_session(one, catalog.agent_key)
        assert await tool_names(two, catalog.agent_key, session_id) == ["frankfurter_latest_rate"]
        assert (
            await two.delete(
                SEED_URL_PATH, headers={**bearer(catalog.agent_key), "MCP-Session-Id": session_id}
            )
        ).status_code == 204

        async def gone_on_first() -> bool:
            r = await one.post(
                SEED_URL_PATH,
                json=TOOLS_LIST,
                headers={**bearer(catalog.agent_key), "MCP-Session-Id": session_id},
            )
            return r.status_code == 404

        await wait_until(gone_on_first, timeout_s=5)


async def test_termination_reaches_a_replica_by_polling_alone(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    catalog = await seed_catalog(client, admin_token)
    no_listen = {"CRANK_MCP_LISTEN": "false"}
    async with (
        run_gateway(database_url, tmp_path, refresh_ms=300, extra_env=no_listen) as first,
        run_gateway(database_url, tmp_path, refresh_ms=300, extra_env=no_listen) as second,
        httpx.AsyncClient(base_url=first.url) as one,
        httpx.AsyncClient(base_url=second.url) as two,
    ):
        session_id = await open_session(one, catalog.agent_key)
        await two.delete(
            SEED_URL_PATH, headers={**bearer(catalog.agent_key), "MCP-Session-Id": session_id}
        )

        async def gone_on_first() -> bool:
            r = await one.post(
                SEED_URL_PATH,
                json=TOOLS_LIST,
                headers={**bearer(catalog.agent_key), "MCP-Session-Id": session_id},
            )
            return r.status_code == 404

        await wait_until(gone_on_first, timeout_s=5)


async def test_publish_reaches_both_replicas_and_drafts_never_do(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    """The seed's scenario: one admin edits a draft while another publishes the agent."""
    catalog = await seed_catalog(client, admin_token)
    async with (
        run_gateway(database_url, tmp_path, refresh_ms=60_000) as first,
        run_gateway(database_url, tmp_path, refresh_ms=60_000) as second,
        httpx.AsyncClient(base_url=first.url) as one,
        httpx.AsyncClient(base_url=second.url) as two,
    ):
        sessions = [await open_session(http, catalog.agent_key) for http in (one, two)]
        # Editor 1: a new operation, draft only; and a draft edit of the published one.
        h = auth(admin_token)
        new_op = {
            "name": "frankfurter_currencies",
            "description": "Lists the currencies Frankfurter knows. Use when the user asks which currencies exist.",
            "input": {"type": "object", "properties": {}},
            "request": {"method": "GET", "url": "https://api.frankfurter.dev/v1/currencies"},
        }
        assert (await client.post(f"{BASE}/operations", json=new_op, headers=h)).is_success
        current = await client.get(f"{BASE}/operations/frankfurter_latest_rate", headers=h)
        edited = {
            **current.json()["draft"],
            "description": "DRAFT ONLY: must never be listed. Gets rates.",
        }
        assert (
            await client.put(
                f"{BASE}/operations/frankfurter_latest_rate",
                json=edited,
                headers=auth(admin_token, current.headers["etag"]),
            )
        ).is_success
        # Editor 2: binds both and publishes the agent.
        agent = await client.get(f"{BASE}/agents/currency-rates", headers=h)
        draft = {
            **agent.json()["draft"],
            "operations": ["frankfurter_latest_rate", "frankfurter_currencies"],
        }
        updated = await client.put(
            f"{BASE}/agents/currency-rates",
            json=draft,
            headers=auth(admin_token, agent.headers["etag"]),
        )
        published = await client.post(
            f"{BASE}/agents/currency-rates/publish",
            headers=auth(admin_token, updated.headers["etag"]),
        )
        assert [w["code"] for w in published.json()["warnings"]] == ["operation_not_published"]

        for http, session_id in zip((one, two), sessions, strict=True):

            async def listed(http: httpx.AsyncClient = http, session_id: str = session_id) -> bool:
                response = await http.post(
                    SEED_URL_PATH,
                    json=TOOLS_LIST,
                    headers={**bearer(catalog.agent_key), "MCP-Session-Id": session_id},
                )
                tools = response.json()["result"]["tools"]
                assert all("DRAFT ONLY" not in tool["description"] for tool in tools)
                return [tool["name"] for tool in tools] == ["frankfurter_latest_rate"]

            await wait_until(listed, timeout_s=5)
        # Publishing the new operation brings it into both catalogs.
        op = await client.get(f"{BASE}/operations/frankfurter_currencies", headers=h)
        assert (
            await client.post(
                f"{BASE}/operations/frankfurter_currencies/publish",
                headers=auth(admin_token, op.headers["etag"]),
            )
        ).is_success
        for http, session_id in zip((one, two), sessions, strict=True):

            async def both(http: httpx.AsyncClient = http, session_id: str = session_id) -> bool:
                return await tool_names(http, catalog.agent_key, session_id) == [
                    "frankfurter_latest_rate",
                    "frankfurter_currencies",
                ]

            await wait_until(both, timeout_s=5)


async def test_new_key_works_at_once_and_revoked_key_stops(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    await seed_catalog(client, admin_token)
    async with (
        run_gateway(
            database_url, tmp_path, refresh_ms=60_000, extra_env={"CRANK_MCP_LISTEN": "false"}
        ) as gateway,
        httpx.AsyncClient(base_url=gateway.url) as http,
    ):
        created = await client.post(
            f"{BASE}/keys", json={"agent": "currency-rates"}, headers=auth(admin_token)
        )
        key = created.json()["key"]
        # Neither LISTEN nor a poll has run: the one database look-up on a miss finds it.
        assert (await http.post(SEED_URL_PATH, json=INIT, headers=bearer(key))).status_code == 200
    async with (
        run_gateway(database_url, tmp_path, refresh_ms=60_000) as gateway,
        httpx.AsyncClient(base_url=gateway.url) as http,
    ):
        assert (await http.post(SEED_URL_PATH, json=INIT, headers=bearer(key))).status_code == 200
        revoked = await client.delete(
            f"{BASE}/keys/{created.json()['id']}", headers=auth(admin_token)
        )
        assert revoked.is_success

        async def refused() -> bool:
            return (
                await http.post(SEED_URL_PATH, json=INIT, headers=bearer(key))
            ).status_code == 401

        await wait_until(refused, timeout_s=5)


async def test_tools_list_changed_reaches_an_open_get_stream(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    catalog = await seed_catalog(client, admin_token)
    async with (
        run_gateway(database_url, tmp_path) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=10) as http,
    ):
        session_id = await open_session(http, catalog.agent_key)
        headers = {
            **bearer(catalog.agent_key),
            "MCP-Session-Id": session_id,
            "Accept": "text/event-stream",
        }
        async with http.stream("GET", SEED_URL_PATH, headers=headers) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"] == "text/event-stream"
            agent = await client.get(f"{BASE}/agents/currency-rates", headers=auth(admin_token))
            draft = {**agent.json()["draft"], "operations": []}
            updated = await client.put(
                f"{BASE}/agents/currency-rates",
                json=draft,
                headers=auth(admin_token, agent.headers["etag"]),
            )
            await client.post(
                f"{BASE}/agents/currency-rates/publish",
                headers=auth(admin_token, updated.headers["etag"]),
            )
            async for line in stream.aiter_lines():
                if line.startswith("data: "):
                    assert '"notifications/tools/list_changed"' in line
                    break
