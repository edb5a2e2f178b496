"""Floods of well-formed unknown keys at a real gateway process: the database look-ups
they cost are bounded per client address and per process, counted by
``crank_key_lookups_total`` on the metrics port (docs/security.md, "Unknown keys")."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from shared.keys import KeyKind, generate_key
from tests.support.api import Client, auth
from tests.support.gateway import SEED_URL_PATH, Gateway, run_gateway, seed_catalog
from tests.support.mcp import INIT, bearer
from tests.support.metrics import served_counts

QUERIES = ("found", "not_found", "failed")  # the results that made a database query


async def lookups(gateway: Gateway) -> dict[str, float]:
    return await served_counts(gateway.metrics_port, "crank_key_lookups_total", "result")


def queries(counts: dict[str, float]) -> float:
    return sum(counts.get(result, 0.0) for result in QUERIES)


def client_at(gateway: Gateway, address: str) -> httpx.AsyncClient:
    """A client whose connections come from ``address`` (any of 127.0.0.0/8 is local)."""
    transport = httpx.AsyncHTTPTransport(local_address=address)
    return httpx.AsyncClient(base_url=gateway.url, transport=transport, timeout=30)


async def post_with(http: httpx.AsyncClient, key: str, **headers: str) -> httpx.Response:
    return await http.post(SEED_URL_PATH, json=INIT, headers={**bearer(key), **headers})


def unknown_key() -> str:
    return generate_key(KeyKind.AGENT)  # right shape and checksum; in no database


async def test_a_flood_from_one_address_costs_a_few_queries_and_a_new_key_still_works(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    await seed_catalog(client, admin_token)
    # No LISTEN and no poll during the test: the new key is known only by a look-up.
    env = {"CRANK_MCP_LISTEN": "false"}
    async with run_gateway(database_url, tmp_path, refresh_ms=60_000, extra_env=env) as gateway:
        async with client_at(gateway, "127.0.0.1") as flooder:
            answers = await asyncio.gather(*(post_with(flooder, unknown_key()) for _ in range(300)))
            assert {answer.status_code for answer in answers} == {401}
            assert all(answer.headers["www-authenticate"] == "Bearer" for answer in answers)
            assert all(answer.json()["error"]["code"] == -32001 for answer in answers)
        counts = await lookups(gateway)
        # CRANK_KEY_LOOKUP_LIMIT_PER_ADDRESS=5/10: five at once, then one every 2 s.
        assert 5 <= queries(counts) <= 8, counts
        assert counts["refused_address"] >= 293
        # A key created now, from another address, works at once (the snapshot lacks it).
        created = await client.post(
            "/api/v1/workspaces/default/keys",
            json={"agent": "currency-rates"},
            headers=auth(admin_token),
        )
        async with client_at(gateway, "127.0.0.2") as fresh:
            assert (await post_with(fresh, created.json()["key"])).status_code == 200
            assert (await fresh.get("/healthz")).status_code == 200
        assert (await lookups(gateway))["found"] == 1


async def test_past_the_process_limit_unknown_keys_get_503_with_the_real_wait(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    await seed_catalog(client, admin_token)
    env = {"CRANK_KEY_LOOKUP_LIMIT": "6/60", "CRANK_KEY_LOOKUP_LIMIT_PER_ADDRESS": "off"}
    async with run_gateway(database_url, tmp_path, extra_env=env) as gateway:
        answers: list[httpx.Response] = []
        for address in ("127.0.0.3", "127.0.0.4", "127.0.0.5"):
            async with client_at(gateway, address) as http:
                answers += await asyncio.gather(
                    *(post_with(http, unknown_key()) for _ in range(40))
                )
        statuses = [answer.status_code for answer in answers]
        assert statuses.count(401) == 6  # the burst: looked up, and unknown
        busy = [answer for answer in answers if answer.status_code == 503]
        assert len(busy) == 114
        for answer in busy:
            assert answer.json()["error"]["code"] == -32001
            assert "Traceback" not in answer.text
            # One look-up every 10 s: the wait is the time until the next one, not a guess.
            assert 1 <= int(answer.headers["retry-after"]) <= 10
        counts = await lookups(gateway)
        assert queries(counts) == 6
        assert counts["refused_busy"] == 114


async def test_concurrent_requests_with_one_unknown_key_make_one_query(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    await seed_catalog(client, admin_token)
    env = {"CRANK_KEY_LOOKUP_LIMIT": "off", "CRANK_KEY_LOOKUP_LIMIT_PER_ADDRESS": "off"}
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=30) as http,
    ):
        key = unknown_key()
        answers = await asyncio.gather(*(post_with(http, key) for _ in range(50)))
        assert {answer.status_code for answer in answers} == {401}
        counts = await lookups(gateway)
        assert queries(counts) == 1
        assert counts.get("joined", 0) + counts.get("remembered", 0) == 49


async def test_behind_a_trusted_proxy_each_forwarded_address_has_its_own_limit(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    await seed_catalog(client, admin_token)
    env: dict[str, Any] = {
        "CRANK_KEY_LOOKUP_LIMIT_PER_ADDRESS": "2/60",
        "CRANK_TRUSTED_PROXIES": "127.0.0.1",
    }
    async with run_gateway(database_url, tmp_path, extra_env=env) as gateway:
        async with client_at(gateway, "127.0.0.1") as proxy:
            for _ in range(5):
                await post_with(proxy, unknown_key(), **{"X-Forwarded-For": "203.0.113.7"})
            assert queries(await lookups(gateway)) == 2
            await post_with(proxy, unknown_key(), **{"X-Forwarded-For": "203.0.113.8"})
            assert queries(await lookups(gateway)) == 3
        # An untrusted peer cannot pick its address by sending the header.
        async with client_at(gateway, "127.0.0.6") as direct:
            for forwarded in ("198.51.100.1", "198.51.100.2", "198.51.100.3"):
                await post_with(direct, unknown_key(), **{"X-Forwarded-For": forwarded})
        counts = await lookups(gateway)
        assert queries(counts) == 5
        assert counts["refused_address"] == 4
