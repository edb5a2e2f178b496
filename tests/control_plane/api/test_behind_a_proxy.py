"""The control plane behind a TLS proxy it trusts (``CRANK_TRUSTED_PROXIES``): the
client address and scheme are the forwarded ones, so the console cookie is Secure
and failed admin tokens are bounded per real client. Real HTTP to a granian
server; the forwarded addresses are documentation addresses named in headers only."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from shared.keys import KeyKind, generate_key
from tests.support.cli import Server
from tests.support.control_plane_server import serve_control_plane

FAILURES_ALLOWED = 3


@pytest.fixture(scope="module")
def proxied(pg_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A control plane that trusts loopback as its proxy, allowing three failed tokens."""
    with serve_control_plane(
        pg_server_url,
        tmp_path_factory.mktemp("proxied"),
        f"crank_proxied_{os.getpid()}",
        CRANK_TRUSTED_PROXIES="127.0.0.1",
        CRANK_ADMIN_TOKEN_FAILURE_LIMIT=f"{FAILURES_ALLOWED}/600",
    ) as served:
        yield served


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession() as session:
        yield session


def forwarded(client: str, scheme: str = "https") -> dict[str, str]:
    return {"X-Forwarded-For": client, "X-Forwarded-Proto": scheme}


async def sign_in_cookie(
    http: aiohttp.ClientSession, server: Server, headers: dict[str, str]
) -> str:
    async with http.post(
        f"{server.url}/ui/sign-in",
        data={"token": server.admin_token, "next": "/ui/"},
        headers=headers,
        allow_redirects=False,
    ) as answer:
        assert answer.status == 303, await answer.text()
        return answer.headers["Set-Cookie"]


async def test_the_console_cookie_is_secure_behind_a_trusted_tls_proxy(
    http: aiohttp.ClientSession, proxied: Server, server: Server
) -> None:
    cookie = await sign_in_cookie(http, proxied, forwarded("198.51.100.20"))
    assert "crank_console=" in cookie
    assert "Secure" in cookie
    # Plain HTTP through the proxy, and the same headers from a peer nobody trusts: not Secure.
    assert "Secure" not in await sign_in_cookie(http, proxied, forwarded("198.51.100.20", "http"))
    assert "Secure" not in await sign_in_cookie(http, server, forwarded("198.51.100.20"))


async def test_failed_admin_tokens_are_bounded_per_client_address(
    http: aiohttp.ClientSession, proxied: Server
) -> None:
    attacker, neighbour = forwarded("198.51.100.1"), forwarded("198.51.100.2")
    workspaces = f"{proxied.url}/api/v1/workspaces"

    async def call(token: str, headers: dict[str, str]) -> aiohttp.ClientResponse:
        async with http.get(
            workspaces, headers={**headers, "Authorization": f"Bearer {token}"}
        ) as answer:
            await answer.read()
            return answer

    for _ in range(FAILURES_ALLOWED):
        assert (await call(generate_key(KeyKind.ADMIN), attacker)).status == 401
    refused = await call(generate_key(KeyKind.ADMIN), attacker)
    assert refused.status == 429
    assert int(refused.headers["Retry-After"]) > 0
    # Refused before the look-up: even a valid token from that address waits.
    assert (await call(proxied.admin_token, attacker)).status == 429
    # Another client is not held back by it.
    assert (await call(proxied.admin_token, neighbour)).status == 200

    async with http.post(
        f"{proxied.url}/ui/sign-in",
        data={"token": proxied.admin_token, "next": "/ui/"},
        headers=attacker,
        allow_redirects=False,
    ) as page:
        assert page.status == 429
        assert "Too many failed sign-ins from your address" in await page.text()
