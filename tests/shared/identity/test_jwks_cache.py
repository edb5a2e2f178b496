"""The JWKS cache against a loopback IdP over real HTTP, through the outbound
executor: rotation, the refetch rate limit, one fetch for concurrent misses, the
last good set while the IdP is down, and the TTL (shared.identity.jwks_cache)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
from joserfc.jwk import RSAKey
from structlog.testing import capture_logs

from shared.engine.outbound import UpstreamExecutor
from shared.engine.ssrf import AddressPolicy, parse_allowlist
from shared.identity.fetching import executor_fetch
from shared.identity.issuers import TrustedIssuer
from shared.identity.jwks_cache import JwksCache
from shared.identity.refusals import TokenRefused
from shared.identity.validator import AccessTokenValidator
from tests.support.identity import AUDIENCE, NOW, JwksServer, jwks, mint, rsa_key, serve_jwks


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Idp:
    server: JwksServer
    issuer: TrustedIssuer
    jwks: JwksCache
    validator: AccessTokenValidator
    monotonic: Clock


@asynccontextmanager
async def idp(first: RSAKey, **cache: float) -> AsyncIterator[Idp]:
    """An IdP publishing ``first``; a validator whose cache fetches through an executor
    that may reach that IdP's port only."""
    async with serve_jwks(jwks(first)) as server:
        policy = AddressPolicy(allowlist=parse_allowlist([f"127.0.0.1:{server.port}"]))
        async with UpstreamExecutor(policy) as executor:
            issuer = TrustedIssuer(issuer=server.base(), jwks_uri=server.url)
            monotonic = Clock(1000.0)
            keys = JwksCache(executor_fetch(executor, timeout_ms=2000), clock=monotonic, **cache)
            validator = AccessTokenValidator([issuer], keys, clock=Clock(NOW))
            yield Idp(server, issuer, keys, validator, monotonic)


async def refused(idp: Idp, token: str) -> str:
    with pytest.raises(TokenRefused) as caught:
        await idp.validator.authenticate(token, AUDIENCE)
    return caught.value.reason


async def test_a_rotated_key_is_fetched_once_and_accepted(rsa: RSAKey, rsa_next: RSAKey) -> None:
    async with idp(rsa) as p:
        assert (await p.validator.authenticate(mint(rsa, p.issuer.issuer), AUDIENCE)).subject
        assert p.server.requests == 1
        p.server.document = jwks(rsa_next, rsa)  # the IdP rotates
        p.monotonic.now += 30  # the refetch interval since the first fetch
        principal = await p.validator.authenticate(mint(rsa_next, p.issuer.issuer), AUDIENCE)
        assert (principal.subject, p.server.requests) == ("user-42", 2)


async def test_a_rotation_right_after_a_good_fetch_is_served_at_once(
    rsa: RSAKey, rsa_next: RSAKey
) -> None:
    """The first token fetched the set; the IdP rotates seconds later: the new kid
    refetches at once. Made-up kids after that still wait for the interval."""
    async with idp(rsa, refetch_interval_s=30) as p:
        await p.validator.authenticate(mint(rsa, p.issuer.issuer), AUDIENCE)
        p.server.document = jwks(rsa_next, rsa)
        p.monotonic.now += 2
        principal = await p.validator.authenticate(mint(rsa_next, p.issuer.issuer), AUDIENCE)
        assert (principal.subject, p.server.requests) == ("user-42", 2)
        p.monotonic.now += 2
        assert await refused(p, mint(rsa_key("made-up"), p.issuer.issuer)) == "unknown_key"
        assert p.server.requests == 2


async def test_unknown_kids_refetch_at_most_once_per_interval(rsa: RSAKey) -> None:
    async with idp(rsa, refetch_interval_s=30) as p:
        await p.validator.authenticate(mint(rsa, p.issuer.issuer), AUDIENCE)
        p.monotonic.now += 31
        for kid in ("made-up-1", "made-up-2", "made-up-3"):
            assert await refused(p, mint(rsa_key(kid), p.issuer.issuer)) == "unknown_key"
        assert p.server.requests == 2  # the first miss refetched; the next two did not
        p.monotonic.now += 30
        assert await refused(p, mint(rsa_key("made-up-4"), p.issuer.issuer)) == "unknown_key"
        assert p.server.requests == 3


async def test_concurrent_misses_share_one_fetch(rsa: RSAKey, rsa_next: RSAKey) -> None:
    async with idp(rsa) as p:
        await p.validator.authenticate(mint(rsa, p.issuer.issuer), AUDIENCE)
        p.monotonic.now += 60
        p.server.document, p.server.delay_s = jwks(rsa_next), 0.2
        tokens = [mint(rsa_next, p.issuer.issuer, sub=f"user-{i}") for i in range(20)]
        principals = await asyncio.gather(*(p.validator.authenticate(t, AUDIENCE) for t in tokens))
        assert len({x.subject for x in principals}) == 20
        assert p.server.requests == 2


async def test_the_last_good_set_serves_while_the_idp_is_down(
    rsa: RSAKey, rsa_next: RSAKey
) -> None:
    async with idp(rsa, ttl_s=600, refetch_interval_s=30) as p:
        await p.validator.authenticate(mint(rsa, p.issuer.issuer, sub="first"), AUDIENCE)
        p.server.up = False
        p.monotonic.now += 3600  # long past the TTL
        token = mint(rsa, p.issuer.issuer, sub="during-outage")
        with capture_logs() as logs:
            assert (await p.validator.authenticate(token, AUDIENCE)).subject == "during-outage"
            await asyncio.sleep(0.3)  # the background refetch fails
            assert await refused(p, mint(rsa_next, p.issuer.issuer)) == "unknown_key"
            p.monotonic.now += 31
            assert await refused(p, mint(rsa_key("x"), p.issuer.issuer)) == "unknown_key"
            assert (await p.validator.authenticate(mint(rsa, p.issuer.issuer), AUDIENCE)).subject
        # Logged once per outage, with the URL and the failure only.
        assert [e for e in logs if e["event"] == "jwks_fetch_failed"] == [
            {
                "event": "jwks_fetch_failed",
                "log_level": "warning",
                "jwks_uri": p.server.url,
                "error": "HTTP 503",
                "keeping_last_good": True,
            }
        ]
        assert p.server.requests == 3
        p.server.up = True
        p.server.document = jwks(rsa_next)
        p.monotonic.now += 31
        assert (await p.validator.authenticate(mint(rsa_next, p.issuer.issuer), AUDIENCE)).subject


async def test_no_key_set_yet_and_the_idp_down_refuses_without_hammering_it(
    rsa: RSAKey,
) -> None:
    async with idp(rsa, refetch_interval_s=30) as p:
        p.server.up = False
        for i in range(5):
            token = mint(rsa, p.issuer.issuer, sub=f"user-{i}")
            assert await refused(p, token) == "keys_unavailable"
        assert p.server.requests == 1
        p.server.up = True
        p.monotonic.now += 30
        assert (await p.validator.authenticate(mint(rsa, p.issuer.issuer), AUDIENCE)).subject


async def test_an_expired_ttl_refreshes_in_the_background(rsa: RSAKey, rsa_next: RSAKey) -> None:
    async with idp(rsa, ttl_s=600) as p:
        await p.jwks.keys(p.server.url)
        p.server.document = jwks(rsa_next)
        p.monotonic.now += 601
        stale = await p.jwks.keys(p.server.url)  # answered at once, from the old set
        assert list(stale.by_kid) == [rsa.kid]
        for _ in range(50):
            if p.server.requests == 2:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.05)
        assert list((await p.jwks.keys(p.server.url)).by_kid) == [rsa_next.kid]
        assert p.server.requests == 2


async def test_the_fetch_goes_through_the_ssrf_guard(rsa: RSAKey) -> None:
    async with serve_jwks(jwks(rsa)) as server:
        # An executor allowed no private address: the loopback IdP is never asked.
        async with UpstreamExecutor(AddressPolicy()) as executor:
            cache = JwksCache(executor_fetch(executor, timeout_ms=2000))
            with pytest.raises(TokenRefused) as caught:
                await cache.keys(server.url)
        assert (caught.value.reason, server.requests) == ("keys_unavailable", 0)


@pytest.mark.parametrize("garbage", [b"not json", b'{"keys": []}', b'{"keys": [{"kty": "oct"}]}'])
async def test_a_broken_key_set_keeps_the_last_good_one(rsa: RSAKey, garbage: bytes) -> None:
    async with idp(rsa) as p:
        await p.jwks.keys(p.server.url)
        p.server.document = garbage
        p.monotonic.now += 31
        assert await refused(p, mint(rsa_key("new"), p.issuer.issuer)) == "unknown_key"
        assert p.server.requests == 2  # fetched, found unusable
        assert (await p.validator.authenticate(mint(rsa, p.issuer.issuer), AUDIENCE)).subject
