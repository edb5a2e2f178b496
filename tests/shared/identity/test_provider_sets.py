"""An IdP outage never stalls a call whose token is remembered (issue 28): a
``ProviderSet`` whose IdP stops answering after its first success still answers
a cached JWT and a cached opaque token at once, while its background rebuild
and another token's introspection hang on that IdP (shared.identity.provider_sets;
docs/architecture.md, "Identity").

Real parts: a loopback IdP over real HTTP (metadata, JWKS, introspection),
fetched through the outbound executor and its SSRF guard. "Hangs" is the IdP
accepting the request and answering nothing until the test lets it go.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import pytest
from aiohttp import web
from joserfc.jwk import RSAKey

from shared.engine.outbound import UpstreamExecutor
from shared.engine.ssrf import AddressPolicy, parse_allowlist
from shared.identity import provider_sets
from shared.identity.access_tokens import Principal
from shared.identity.fetching import executor_fetch, executor_post
from shared.identity.issuers import DEFAULT_ALGORITHMS
from shared.identity.jwks_cache import JwksCache
from shared.identity.metadata_cache import MetadataCache
from shared.identity.provider_sets import IdentityParts, ProviderSet, ProviderSettings
from shared.identity.refusals import TokenRefused
from tests.support.gateway import serve_upstream, wait_until
from tests.support.identity import AUDIENCE, jwks, mint

AT_ONCE_S = 0.5  # a cached answer is microseconds; this bounds it on a loaded machine
OPAQUE = "opaque-token-0123456789"


@dataclass
class HangingIdp:
    """Issuer ``/a`` publishes metadata (with an introspection endpoint) and a JWKS;
    issuer ``/b`` publishes nothing (404) yet. ``hang()``: every later request is
    held unanswered until ``release()``."""

    key: RSAKey
    port: int = 0
    requests: int = 0
    held: int = 0  # requests waiting unanswered now
    hanging: bool = False
    moved: bool = False  # the metadata names /a/keys instead of /a/jwks
    released: asyncio.Event = field(default_factory=asyncio.Event)

    def issuer(self, name: str) -> str:
        return f"http://127.0.0.1:{self.port}/{name}"

    def hang(self) -> None:
        self.hanging = True

    def release(self) -> None:
        self.released.set()

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.hanging:
            self.held += 1
            try:
                await self.released.wait()
            finally:
                self.held -= 1
        a = self.issuer("a")
        if request.path == "/a/.well-known/openid-configuration":
            document = {
                "issuer": a,
                "jwks_uri": f"{a}/keys" if self.moved else f"{a}/jwks",
                "introspection_endpoint": f"{a}/introspect",
            }
            return web.json_response(document)
        if request.path in ("/a/jwks", "/a/keys"):
            return web.Response(body=jwks(self.key), content_type="application/json")
        if request.path == "/a/introspect":
            form = await request.post()
            now = int(time.time())
            answer = {
                "active": form.get("token") == OPAQUE,
                "iss": a,
                "sub": "user-7",
                "aud": AUDIENCE,
                "exp": now + 600,
                "scope": "orders:read",
            }
            return web.json_response(answer)
        return web.Response(status=404)


def settings(name: str, issuer: str, *, introspects: bool = False) -> ProviderSettings:
    return ProviderSettings(
        name=name,
        issuer=issuer,
        algorithms=DEFAULT_ALGORITHMS,
        token_types=("at+jwt",),
        subject_claim="sub",
        groups_claim=None,
        leeway_s=30,
        introspection_client_id="crank" if introspects else None,
        introspection_secret="s3cret" if introspects else None,
    )


@asynccontextmanager
async def provider_set(key: RSAKey) -> AsyncIterator[tuple[HangingIdp, ProviderSet]]:
    """A set trusting ``/a`` (introspecting) and ``/b`` (metadata missing), with the
    process's caches as the gateway makes them: every request through an executor
    that may reach the IdP's port only."""
    idp = HangingIdp(key)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", idp.handle)
    async with serve_upstream(app, handler_cancellation=True) as port:
        idp.port = port
        policy = AddressPolicy(allowlist=parse_allowlist([f"127.0.0.1:{port}"]))
        async with UpstreamExecutor(policy) as executor:
            fetch = executor_fetch(executor, timeout_ms=30_000)
            parts = IdentityParts(
                MetadataCache(fetch, retry_interval_s=0.0, fetch_timeout_s=30.0),
                JwksCache(fetch, ttl_s=0.0),  # every key look-up would refresh in the background
                executor_post(executor, timeout_ms=30_000),
            )
            providers = [
                settings("a", idp.issuer("a"), introspects=True),
                settings("b", idp.issuer("b")),
            ]
            try:
                yield idp, ProviderSet(providers, parts)
            finally:
                idp.release()  # the held requests answer; the background work ends
                await asyncio.sleep(0.05)


async def answered_at_once(providers: ProviderSet, token: str) -> Principal:
    async with asyncio.timeout(AT_ONCE_S):
        return await providers.authenticate(token, AUDIENCE)


async def test_cached_tokens_answer_at_once_while_the_idp_hangs(
    rsa: RSAKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Look for /b's missing metadata on every call: each call starts a rebuild.
    monkeypatch.setattr(provider_sets, "RETRY_MISSING_S", 0.0)
    async with provider_set(rsa) as (idp, providers):
        now = int(time.time())
        jwt = mint(rsa, idp.issuer("a"), exp=now + 600, iat=now - 10)
        first = await providers.authenticate(jwt, AUDIENCE)  # metadata, JWKS, signature
        opaque = await providers.authenticate(OPAQUE, AUDIENCE)  # introspected
        assert (first.subject, opaque.subject) == ("user-42", "user-7")

        idp.hang()
        before = idp.requests
        # A new opaque token's introspection hangs on the IdP ...
        pending = asyncio.create_task(providers.authenticate("another-opaque-token", AUDIENCE))
        for _ in range(50):
            # ... and the cached tokens still answer at once, each call starting a
            # rebuild in the background that waits on /b's metadata.
            assert await answered_at_once(providers, jwt) == first
            assert await answered_at_once(providers, OPAQUE) == opaque
        await asyncio.sleep(0.05)  # let the background requests reach the IdP
        assert idp.requests > before  # the refresh and the introspection did ask it
        assert idp.held >= 2  # and are still waiting for an answer
        assert not pending.done()
        assert await answered_at_once(providers, jwt) == first

        idp.release()
        with pytest.raises(TokenRefused) as refused:
            async with asyncio.timeout(5):
                await pending
        assert refused.value.reason == "inactive"


async def test_a_set_asks_for_its_metadata_again_and_follows_a_change(
    rsa: RSAKey, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The metadata cache refreshes only when asked; a built set asks again every
    LOOK_AGAIN_S, so an IdP that moves its JWKS is followed without a restart."""
    monkeypatch.setattr(provider_sets, "LOOK_AGAIN_S", 0.0)
    async with provider_set(rsa) as (idp, providers):
        cache = providers._parts.metadata
        now = int(time.time())
        jwt = mint(rsa, idp.issuer("a"), exp=now + 600, iat=now - 10)
        await providers.authenticate(jwt, AUDIENCE)
        generation = cache.generation
        cache._ttl_s = 0.0  # every look finds the document old
        idp.moved = True  # the next document names another JWKS URL

        async def followed() -> bool:
            await providers.authenticate(jwt, AUDIENCE)
            return cache.generation > generation and providers._generation == cache.generation

        await wait_until(followed, timeout_s=5)
