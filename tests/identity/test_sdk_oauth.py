"""MCP authorization end to end with real parts: the official MCP Python SDK's
``OAuthClientProvider`` signing in at a real OpenID provider (oidc-provider) and
calling a real gateway in both protocol eras, refreshing its token when it expires;
the provider rotating its signing key, or stopping, while clients keep calling; and
two gateway replicas behind one public URL sharing a person's rate limit.

The Python SDK (2.x) speaks both eras: ``mode="legacy"`` is the 2025 session era
(initialize, MCP-Session-Id), ``mode="auto"`` discovers and speaks 2026-07-28
(stateless), as tests/gateway/transport/test_modern.py reaches them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from pydantic import AnyUrl

from tests.support.api import Client
from tests.support.gateway import wait_until
from tests.support.mcp import META, VERSION, modern, request
from tests.support.oauth_shop import SHOP_PATH, Shop, open_shop
from tests.support.oidc import REDIRECT_URI, MemoryTokenStorage, jwt_parts
from tests.support.tool_calls import rpc

LEGACY_VERSION = "2025-11-25"  # what the SDK's legacy mode negotiates
# Long enough for the sign-in and the first calls, short enough to wait out.
SHORT_TTL_S = 2
# No call may wait on an unreachable provider: each is bounded well below any fetch timeout.
CALL_BOUND_S = 3.0


class Wire:
    """Every request the SDK's HTTP client sends, with the status it got back
    (the auth flow's own requests, discovery, registration and token, included)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str, int, dict[str, str]]] = []

    async def on_response(self, response: httpx2.Response) -> None:
        sent = response.request
        form: dict[str, str] = {}
        if sent.headers.get("content-type", "").startswith("application/x-www-form-urlencoded"):
            form = {k: v[0] for k, v in parse_qs(sent.content.decode()).items()}
        self.sent.append((sent.method, str(sent.url), response.status_code, form))

    def grants(self, token_endpoint: str) -> list[str]:
        """The grant_type of each request to the token endpoint, in order."""
        return [form["grant_type"] for _, url, _, form in self.sent if url == token_endpoint]


def _sdk_auth(shop: Shop, storage: MemoryTokenStorage, asked: list[str]) -> OAuthClientProvider:
    """The SDK's OAuth client for the shop, a person signing in as dana; every
    authorization URL it opens is kept in ``asked``."""
    user = shop.idp.user("dana")

    async def redirect(url: str) -> None:
        asked.append(url)
        await user.redirect_handler(url)  # on its own HTTP client, as the SDK needs

    return OAuthClientProvider(
        server_url=shop.resource,
        client_metadata=OAuthClientMetadata(
            redirect_uris=[AnyUrl(REDIRECT_URI)],
            token_endpoint_auth_method="none",
            client_name="crank-sdk-oauth-test",
        ),
        storage=storage,
        redirect_handler=redirect,
        callback_handler=user.callback_handler,
    )


@pytest.mark.parametrize(("mode", "version"), [("legacy", LEGACY_VERSION), ("auto", VERSION)])
async def test_the_sdk_signs_in_calls_and_refreshes_its_token(
    client: Client,
    admin_token: str,
    database_url: str,
    tmp_path: Path,
    mode: str,
    version: str,
) -> None:
    async with open_shop(
        client, admin_token, database_url, tmp_path, access_token_ttl_s=SHORT_TTL_S
    ) as shop:
        discovery = await shop.idp.discovery()
        storage, wire = MemoryTokenStorage(), Wire()
        asked: list[str] = []
        oauth = _sdk_auth(shop, storage, asked)
        async with (
            httpx2.AsyncClient(
                auth=oauth, timeout=20, event_hooks={"response": [wire.on_response]}
            ) as http,
            McpClient(streamable_http_client(shop.resource, http_client=http), mode=mode) as mcp,
        ):
            assert mcp.protocol_version == version
            tools = await mcp.list_tools()
            assert [tool.name for tool in tools.tools] == ["hours"]  # shop:read alone
            result = await mcp.call_tool("hours", {})
            assert result.structured_content == {"path": "/hours", "authorization": False}

            # The flow, in order: the 401 and its challenge, the Protected Resource
            # Metadata it names, the provider's metadata, registration, the token.
            prm = f"{shop.url}/.well-known/oauth-protected-resource{SHOP_PATH}"
            flow = [(method, url, status) for method, url, status, _ in wire.sent]
            assert flow[:5] == [
                ("POST", shop.resource, 401),
                ("GET", prm, 200),
                ("GET", f"{shop.idp.issuer}/.well-known/oauth-authorization-server", 200),
                ("POST", discovery["registration_endpoint"], 201),
                ("POST", discovery["token_endpoint"], 200),
            ]
            assert flow[5] == ("POST", shop.resource, 200)  # the first request, retried
            assert len(asked) == 1
            authorize = parse_qs(urlsplit(asked[0]).query)
            assert asked[0].startswith(discovery["authorization_endpoint"] + "?")
            assert authorize["resource"] == [shop.resource]
            assert authorize["code_challenge_method"] == ["S256"]
            assert "shop:read" in authorize["scope"][0].split()
            exchange = wire.sent[4][3]
            assert (exchange["grant_type"], exchange["resource"]) == (
                "authorization_code",
                shop.resource,
            )
            assert "code_verifier" in exchange
            assert storage.tokens is not None
            assert storage.tokens.refresh_token is not None
            claims = jwt_parts(storage.tokens.access_token)[1]
            assert (claims["aud"], claims["sub"]) == (shop.resource, "dana")

            # The access token expires; the next call refreshes it first and succeeds.
            # (On a slow machine the SDK may already have refreshed once: count from here.)
            grants = wire.grants(discovery["token_endpoint"])
            assert grants[0] == "authorization_code"
            assert set(grants[1:]) <= {"refresh_token"}
            first = storage.tokens.access_token
            expiry = oauth.context.token_expiry_time
            assert expiry is not None

            async def expired() -> bool:
                return time.time() > expiry

            await wait_until(expired, timeout_s=SHORT_TTL_S + 5)
            before = len(wire.sent)
            again = await mcp.call_tool("hours", {})
            assert again.structured_content == {"path": "/hours", "authorization": False}
            assert wire.grants(discovery["token_endpoint"]) == [*grants, "refresh_token"]
            refreshed = [form for _, _, _, form in wire.sent[before:] if form]
            assert refreshed[0]["resource"] == shop.resource
            assert storage.tokens.access_token != first
            assert jwt_parts(storage.tokens.access_token)[1]["aud"] == shop.resource
            assert len(asked) == 1, "the person was asked to sign in again"
            # The requests after the refresh carried the new token and were answered.
            calls = [status for _, url, status, _ in wire.sent[before:] if url == shop.resource]
            assert calls, wire.sent[before:]
            assert set(calls) == {200}, wire.sent[before:]


async def _call(http: httpx.AsyncClient, token: str, path: str = SHOP_PATH) -> httpx.Response:
    """One modern-era tools/call of hours, bounded in time."""
    async with asyncio.timeout(CALL_BOUND_S):
        return await http.post(
            path,
            json=rpc("tools/call", {"name": "hours", "arguments": {}, "_meta": META}),
            headers=modern(token, "tools/call", **{"Mcp-Name": "hours"}),
        )


class Calling:
    """A client that keeps calling with one token until stopped, keeping every status."""

    def __init__(self, http: httpx.AsyncClient, token: str) -> None:
        self.statuses: list[int] = []
        self._stop = asyncio.Event()
        self._task = asyncio.create_task(self._run(http, token))

    async def _run(self, http: httpx.AsyncClient, token: str) -> None:
        while not self._stop.is_set():
            self.statuses.append((await _call(http, token)).status_code)

    def made(self, calls: int) -> Callable[[], Awaitable[bool]]:
        """A predicate: at least ``calls`` more calls than now were answered."""
        target = len(self.statuses) + calls

        async def reached() -> bool:
            return len(self.statuses) >= target

        return reached

    async def stop(self) -> list[int]:
        self._stop.set()
        await self._task
        return self.statuses


async def test_a_key_rotation_at_the_provider_fails_no_call(shop: Shop) -> None:
    old = await shop.token("shop:read")
    old_kid = shop.idp.signing_kid
    caller = Calling(shop.http, old)
    try:
        await wait_until(caller.made(1))

        # The provider rotates with an overlap: the new key signs, the old is still published.
        await shop.idp.restart(new_keys=True, keep_old_keys=True)
        assert shop.idp.signing_kid != old_kid
        fresh = await shop.token("shop:read", login="erin")
        assert jwt_parts(fresh)[0]["kid"] == shop.idp.signing_kid
        answer = await _call(shop.http, fresh)  # the unknown kid fetches the keys again
        assert answer.status_code == 200, answer.text
        await wait_until(caller.made(3))

        # Later the old key is gone from the provider's keys: the old token was already
        # checked, the new key is known, and both keep working.
        await shop.idp.retire_old_keys()
        assert [k["kid"] for k in (await shop.idp.jwks())["keys"]] == [shop.idp.signing_kid]
        newest = await shop.token("shop:read", login="finn")
        assert (await _call(shop.http, newest)).status_code == 200
        assert (await _call(shop.http, fresh)).status_code == 200
        await wait_until(caller.made(3))
    finally:
        statuses = await caller.stop()
    assert set(statuses) == {200}, statuses


async def test_with_the_provider_down_known_keys_serve_and_no_keys_means_503(
    shop: Shop,
) -> None:
    seen = await shop.token("shop:read")
    assert (await _call(shop.http, seen)).status_code == 200  # fetches metadata and keys
    unseen = await shop.token("shop:read", login="erin")  # never shown to the gateway yet
    await shop.idp.stop()

    # Nothing waits on the unreachable provider: a checked token is remembered, a new
    # one is checked with the keys fetched before.
    for token in (seen, unseen, seen):
        answer = await _call(shop.http, token)
        assert answer.status_code == 200, answer.text

    # A replica started during the outage never fetched the keys: the token may be good,
    # so it is 503 with Retry-After, not 401.
    async with shop.replica() as fresh, httpx.AsyncClient(base_url=fresh.url) as http:
        for token in (seen, unseen):
            answer = await _call(http, token)
            assert answer.status_code == 503, answer.text
            assert int(answer.headers["retry-after"]) > 0
            assert "identity provider is unreachable" in answer.json()["error"]["message"]
        # Keys still work there: the outage is the provider's, not the gateway's.
        listed = await http.post(
            SHOP_PATH, json=request("tools/list"), headers=modern(shop.key, "tools/list")
        )
        assert listed.status_code == 200, listed.text


async def _replicas(url: str) -> int:
    async with httpx.AsyncClient() as http:
        return int((await http.get(f"{url}/readyz")).json()["replicas"])


async def test_two_replicas_take_one_token_and_share_a_persons_rate_limit(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    """docs/mcp-interface.md, "Several replicas": with traffic spread evenly the cluster
    admits the limit within one call per replica; a person's budget is one whatever
    number of clients they use, and another person has their own."""
    requests, per_seconds = 4, 60
    limit = {"requests": requests, "per_seconds": per_seconds}
    async with (
        open_shop(client, admin_token, database_url, tmp_path, rate_limit=limit) as shop,
        shop.replica() as second,
        httpx.AsyncClient(base_url=second.url, timeout=20) as two,
    ):

        async def both_see_two() -> bool:
            return await _replicas(shop.url) == 2 and await _replicas(second.url) == 2

        await wait_until(both_see_two, timeout_s=10)
        # Dana signs in from two clients (each sign-in registers its own), Erin from one.
        laptop = await shop.token("shop:read")
        phone = await shop.token("shop:read")
        erin = await shop.token("shop:read", login="erin")
        claims = [jwt_parts(token)[1] for token in (laptop, phone)]
        assert claims[0]["client_id"] != claims[1]["client_id"]
        assert claims[0]["sub"] == claims[1]["sub"] == "dana"

        # One token, whichever replica answers (the canonical URL names the public origin).
        for http in (shop.http, two):
            listed = await http.post(
                SHOP_PATH, json=request("tools/list"), headers=modern(laptop, "tools/list")
            )
            assert listed.status_code == 200, listed.text

        # Dana's two clients, spread evenly over the replicas, share her one budget.
        started = time.monotonic()
        at_first: list[int] = []  # the laptop's, at the first replica
        at_second: list[int] = []  # the phone's, at the second
        for _ in range(2 * requests):
            at_first.append((await _call(shop.http, laptop)).status_code)
            at_second.append((await _call(two, phone)).status_code)
        refilled = requests * (time.monotonic() - started) / per_seconds
        statuses = at_first + at_second
        assert set(statuses) == {200, 429}, statuses
        admitted = statuses.count(200)
        assert requests - 2 <= admitted <= requests + 2 + refilled, statuses
        # Each replica enforces its share, never the whole limit.
        assert 1 <= at_first.count(200) < requests, at_first
        assert 1 <= at_second.count(200) < requests, at_second
        # On one replica her two clients draw from one bucket: the laptop spent it.
        refused = await _call(shop.http, phone)
        assert refused.status_code == 429, refused.text
        assert int(refused.headers["retry-after"]) > 0
        # Erin has her own budget, on both replicas.
        for http in (shop.http, two):
            answer = await _call(http, erin)
            assert answer.status_code == 200, answer.text
