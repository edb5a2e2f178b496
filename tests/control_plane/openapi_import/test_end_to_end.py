"""Imported tools called end to end: the Swagger petstore imported through the API,
a sample of its operations published to an agent, and a real gateway process calling
a petstore on loopback (allowlisted by CRANK_UPSTREAM_ALLOWLIST)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from tests.support.api import Client, auth, grant_egress
from tests.support.gateway import run_gateway, serve_upstream
from tests.support.mcp import bearer
from tests.support.paths import OPENAPI_FIXTURES as FIXTURES
from tests.support.processes import free_port
from tests.support.rates import open_session_at

WS = "/api/v1/workspaces/default"
PATH = "/mcp/v1/default/pets"
SAMPLE = ["find_pets_by_status", "get_pet_by_id", "add_pet", "place_order"]
SECRETS = {"swagger_petstore_petstore_auth": "oauth-token", "swagger_petstore_api_key": "k-123"}
REX = {
    "id": 7,
    "name": "Rex",
    "status": "available",
    "photoUrls": ["https://img.example/rex.png"],
    "tags": [{"id": 1, "name": "good"}],
    "category": {"id": 2, "name": "dogs"},
}


class Petstore:
    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[tuple[str, str, dict[str, str], Any]] = []

    async def record(self, request: web.Request) -> None:
        body = await request.json() if request.can_read_body else None
        # Header names in any case (HTTP's are case-insensitive; reqwest title-cases them).
        headers = {
            k.lower(): v
            for k, v in request.headers.items()
            if k.lower() in ("authorization", "api_key")
        }
        self.seen.append((request.method, request.path_qs, headers, body))

    async def find(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.json_response([REX, {**REX, "id": 8, "name": "Tom"}])

    async def get(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.json_response({**REX, "id": int(request.match_info["pet_id"])})

    async def add(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.json_response({**REX, **(await request.json())})

    async def order(self, request: web.Request) -> web.Response:
        await self.record(request)
        return web.json_response({"id": 99, "status": "placed", **(await request.json())})


@pytest.fixture
async def petstore() -> AsyncIterator[Petstore]:
    state = Petstore()
    app = web.Application()
    app.router.add_get("/v2/pet/findByStatus", state.find)
    app.router.add_get("/v2/pet/{pet_id}", state.get)
    app.router.add_post("/v2/pet", state.add)
    app.router.add_post("/v2/store/order", state.order)
    async with serve_upstream(app, state.port):
        yield state


async def import_and_publish(client: Client, admin: str, port: int) -> str:
    """Import the petstore, publish the sample and an agent with it; the agent's key."""
    h = auth(admin)
    assert (await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=h)).is_success
    await grant_egress(client, admin, "default", f"127.0.0.1:{port}")
    document = json.loads((FIXTURES / "petstore-3.0.json").read_text())
    report = (
        await client.post(
            f"{WS}/import/openapi",
            json={
                "document": document,
                "base_url": f"http://127.0.0.1:{port}/v2",
                "include": [
                    f"operation:{name}"
                    for name in ("findPetsByStatus", "getPetById", "addPet", "placeOrder")
                ],
                "agent": "pets",
            },
            headers=h,
        )
    ).json()
    assert sorted(report["created"]) == sorted(SAMPLE), report
    for name, value in SECRETS.items():
        assert (
            await client.put(f"{WS}/secrets/{name}", json={"value": value}, headers=h)
        ).is_success
    for name in SAMPLE:
        current = await client.get(f"{WS}/operations/{name}", headers=h)
        published = await client.post(
            f"{WS}/operations/{name}/publish", headers=auth(admin, current.headers["etag"])
        )
        assert published.is_success, published.text
    agent = await client.get(f"{WS}/agents/pets", headers=h)
    assert agent.json()["draft"]["operations"] == report["created"]
    published = await client.post(
        f"{WS}/agents/pets/publish", headers=auth(admin, agent.headers["etag"])
    )
    assert published.is_success, published.text
    key = await client.post(f"{WS}/keys", json={"agent": "pets"}, headers=h)
    return str(key.json()["key"])


async def rpc(http: httpx.AsyncClient, headers: dict[str, str], method: str, params: Any) -> Any:
    response = await http.post(
        PATH, json={"jsonrpc": "2.0", "id": 2, "method": method, "params": params}, headers=headers
    )
    assert response.status_code == 200, response.text
    return response.json()["result"]


async def test_imported_petstore_tools_are_listed_and_called_end_to_end(
    client: Client, admin_token: str, database_url: str, tmp_path: Path, petstore: Petstore
) -> None:
    key = await import_and_publish(client, admin_token, petstore.port)
    env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{petstore.port}"}
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=20) as http,
    ):
        session = {**bearer(key), "MCP-Session-Id": await open_session_at(http, key, PATH)}

        tools = {t["name"]: t for t in (await rpc(http, session, "tools/list", {}))["tools"]}
        assert sorted(tools) == sorted(SAMPLE)
        assert tools["get_pet_by_id"]["annotations"]["readOnlyHint"] is True
        assert tools["find_pets_by_status"]["outputSchema"]["type"] == "object"  # wrapped array

        found = await rpc(
            http,
            session,
            "tools/call",
            {"name": "find_pets_by_status", "arguments": {"status": ["available", "sold"]}},
        )
        assert found["isError"] is False, found
        assert found["structuredContent"] == {
            "items": [
                {"id": 7, "name": "Rex", "status": "available"},
                {"id": 8, "name": "Tom", "status": "available"},
            ]
        }
        assert petstore.seen[-1] == (
            "GET",
            "/v2/pet/findByStatus?status=available&status=sold",
            {"authorization": "Bearer oauth-token"},
            None,
        )

        one = await rpc(
            http, session, "tools/call", {"name": "get_pet_by_id", "arguments": {"petId": 42}}
        )
        assert one["isError"] is False, one
        assert one["structuredContent"] == {  # the suggested select: scalars, and tags projected
            "id": 42,
            "name": "Rex",
            "status": "available",
            "tags": [{"id": 1, "name": "good"}],
        }
        assert petstore.seen[-1][:3] == ("GET", "/v2/pet/42", {"api_key": "k-123"})

        added = await rpc(
            http,
            session,
            "tools/call",
            {"name": "add_pet", "arguments": {"name": "Bo", "photoUrls": [], "status": "pending"}},
        )
        assert added["isError"] is False, added
        assert petstore.seen[-1][3] == {"name": "Bo", "photoUrls": [], "status": "pending"}
        assert added["structuredContent"]["name"] == "Bo"

        order = await rpc(
            http,
            session,
            "tools/call",
            {"name": "place_order", "arguments": {"petId": 7, "quantity": 2}},
        )
        assert order["isError"] is False, order
        assert petstore.seen[-1][:2] == ("POST", "/v2/store/order")
        assert petstore.seen[-1][3] == {"petId": 7, "quantity": 2}

        invalid = await rpc(
            http, session, "tools/call", {"name": "get_pet_by_id", "arguments": {"petId": "x"}}
        )
        assert invalid["structuredContent"]["error_code"] == "invalid_arguments"
        assert len(petstore.seen) == 4  # nothing was sent for the invalid call
