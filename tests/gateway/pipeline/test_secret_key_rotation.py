"""A running gateway keeps calling an upstream with a workspace secret while
``rotate_key`` re-seals that secret under the new key; afterwards a gateway
that knows only the new key serves it too (docs/architecture.md, "Key rotation")."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
from aiohttp import web

from control_plane.services.key_rotation import rotate_key
from shared.crypto import SecretBox, secret_associated_data
from shared.db import connect, open_pool
from tests.support.api import Client, auth, grant_egress
from tests.support.db import TEST_SECRET_KEY
from tests.support.gateway import FRANKFURTER, run_gateway, serve_upstream
from tests.support.mcp import bearer
from tests.support.processes import free_port
from tests.support.rates import PATH, call_body, open_session_at
from tests.support.tool_calls import publish_agent, publish_operation

OLD_KEY = "an-older-secret-key-that-is-long-enough-987654"
TOKEN = "upstream-token-0123456789"


class Upstream:
    """Answers a rate to the right bearer token only; records the tokens it saw."""

    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[str] = []

    async def latest(self, request: web.Request) -> web.Response:
        self.seen.append(request.headers.get("Authorization", ""))
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return web.json_response({"message": "who are you"}, status=401)
        return web.json_response({"base": "USD", "date": "2026-12-01", "rates": {"EUR": 0.9}})


async def seed(client: Client, admin: str, database_url: str, port: int) -> str:
    """Workspace default with RATES_TOKEN sealed by the old key, as an earlier
    deployment stored it, and agent ``rates`` whose tool sends it; the agent's key."""
    h = auth(admin)
    assert (await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=h)).is_success
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT id FROM workspaces WHERE slug = 'default'")
        ws = await cur.fetchone()
        assert ws is not None
        sealed = SecretBox(OLD_KEY).seal(TOKEN, secret_associated_data(ws["id"], "RATES_TOKEN"))
        await conn.execute(
            """INSERT INTO secrets (workspace_id, name, ciphertext, nonce, key_id)
               VALUES (%s, 'RATES_TOKEN', %s, %s, %s)""",
            (ws["id"], sealed.ciphertext, sealed.nonce, sealed.key_id),
        )
        await conn.commit()
    await grant_egress(client, admin, "default", f"127.0.0.1:{port}")
    spec = {
        **FRANKFURTER,
        "name": "latest_rate",
        "request": {
            **FRANKFURTER["request"],
            "url": f"http://127.0.0.1:{port}/v1/latest",
            "auth": {"type": "bearer", "secret": "RATES_TOKEN"},
        },
        "execution_config": {"timeout_ms": 2000, "retries": 0},
    }
    await publish_operation(client, admin, spec)
    return await publish_agent(client, admin, "rates", ["latest_rate"])


async def call_rate(http: httpx.AsyncClient, key: str, session: str) -> dict[str, object]:
    response = await http.post(
        PATH,
        json=call_body("latest_rate", {"base": "USD", "quote": "EUR"}),
        headers={**bearer(key), "MCP-Session-Id": session},
    )
    assert response.status_code == 200, response.text
    result: dict[str, object] = response.json()["result"]
    return result


async def test_a_gateway_serves_a_secret_through_its_rotation_to_the_new_key(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    upstream = Upstream()
    app = web.Application()
    app.router.add_get("/v1/latest", upstream.latest)
    async with serve_upstream(app, upstream.port):
        key = await seed(client, admin_token, database_url, upstream.port)
        allow = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream.port}"}
        rotating = {**allow, "CRANK_SECRET_KEY_PREVIOUS": OLD_KEY}
        async with (
            run_gateway(database_url, tmp_path, extra_env=rotating) as gateway,
            httpx.AsyncClient(base_url=gateway.url, timeout=20) as http,
        ):
            session = await open_session_at(http, key)
            assert (await call_rate(http, key, session))["isError"] is False

            async def keep_calling() -> list[object]:
                return [(await call_rate(http, key, session))["isError"] for _ in range(20)]

            pool = await open_pool(database_url, max_size=2)
            try:
                box = SecretBox(TEST_SECRET_KEY, previous=(OLD_KEY,))
                calls, report = await asyncio.gather(keep_calling(), rotate_key(pool, box, "test"))
            finally:
                await pool.close()
            assert report.rotated == 1
            await asyncio.sleep(0.5)  # let the catalog bump reach it (LISTEN): it reloads
            after = await call_rate(http, key, session)
            assert calls == [False] * 20
            assert after["isError"] is False

        # The old key can go: a gateway without it opens the re-sealed secret.
        async with (
            run_gateway(database_url, tmp_path, extra_env=allow) as gateway,
            httpx.AsyncClient(base_url=gateway.url, timeout=20) as http,
        ):
            session = await open_session_at(http, key)
            assert (await call_rate(http, key, session))["isError"] is False
    assert set(upstream.seen) == {f"Bearer {TOKEN}"}
