"""Validation results remembered by digest (shared.identity.result_cache): a repeat
call does no signature work, entries end with the token, memory stays bounded,
lasting refusals are remembered briefly and passing ones not at all."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from joserfc.jwk import RSAKey

from shared.engine.outbound import UpstreamExecutor
from shared.engine.ssrf import AddressPolicy, parse_allowlist
from shared.identity.access_tokens import Principal
from shared.identity.fetching import executor_fetch
from shared.identity.issuers import TrustedIssuer
from shared.identity.jwks_cache import JwksCache
from shared.identity.refusals import TokenRefused
from shared.identity.result_cache import ResultCache, token_digest
from shared.identity.validator import AccessTokenValidator
from tests.support.identity import (
    AUDIENCE,
    NOW,
    OTHER_AUDIENCE,
    JwksServer,
    jwks,
    mint,
    rsa_key,
    serve_jwks,
)


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def server(rsa: RSAKey) -> AsyncIterator[JwksServer]:
    async with serve_jwks(jwks(rsa)) as running:
        yield running


@pytest.fixture
async def executor(server: JwksServer) -> AsyncIterator[UpstreamExecutor]:
    policy = AddressPolicy(allowlist=parse_allowlist([f"127.0.0.1:{server.port}"]))
    async with UpstreamExecutor(policy) as running:
        yield running


def validator(
    server: JwksServer,
    executor: UpstreamExecutor,
    results: ResultCache,
    wall: Clock,
    monotonic: Clock | None = None,
) -> AccessTokenValidator:
    issuer = TrustedIssuer(issuer=server.base(), jwks_uri=server.url)
    keys = JwksCache(executor_fetch(executor), clock=monotonic or Clock(0.0))
    return AccessTokenValidator([issuer], keys, results, clock=wall)


async def test_a_repeat_call_is_answered_without_the_key(
    server: JwksServer, executor: UpstreamExecutor, rsa: RSAKey, rsa_next: RSAKey
) -> None:
    monotonic = Clock(0.0)
    check = validator(server, executor, ResultCache(), Clock(NOW), monotonic)
    seen = mint(rsa, server.base())
    first = await check.authenticate(seen, AUDIENCE)
    # The IdP drops the key and the cache learns it: a full validation of a token
    # signed by it now fails, so only the remembered result can accept ``seen``.
    server.document = jwks(rsa_next)
    monotonic.now += 60
    await check.authenticate(mint(rsa_next, server.base()), AUDIENCE)
    with pytest.raises(TokenRefused, match="unknown_key"):
        await check.authenticate(mint(rsa, server.base(), sub="someone-new"), AUDIENCE)
    requests = server.requests
    assert await check.authenticate(seen, AUDIENCE) == first
    assert server.requests == requests


async def test_remembered_answers_from_memory_alone_what_authenticate_learned(
    server: JwksServer, executor: UpstreamExecutor, rsa: RSAKey
) -> None:
    check = validator(server, executor, ResultCache(), Clock(NOW))
    token = mint(rsa, server.base())
    assert check.remembered(token, AUDIENCE) is None  # never seen: the caller must await
    principal = await check.authenticate(token, AUDIENCE)
    assert check.remembered(token, AUDIENCE) == principal
    assert check.remembered(token, OTHER_AUDIENCE) is None
    forged = token[:-4] + "AAAA"
    with pytest.raises(TokenRefused, match="bad_signature"):
        await check.authenticate(forged, AUDIENCE)
    with pytest.raises(TokenRefused, match="bad_signature"):  # the refusal is remembered too
        check.remembered(forged, AUDIENCE)


async def test_a_remembered_token_is_for_its_audience_only(
    server: JwksServer, executor: UpstreamExecutor, rsa: RSAKey
) -> None:
    check = validator(server, executor, ResultCache(), Clock(NOW))
    token = mint(rsa, server.base())
    await check.authenticate(token, AUDIENCE)
    with pytest.raises(TokenRefused, match="wrong_audience"):
        await check.authenticate(token, OTHER_AUDIENCE)


async def test_a_remembered_token_ends_when_it_expires(
    server: JwksServer, executor: UpstreamExecutor, rsa: RSAKey
) -> None:
    wall = Clock(NOW)
    check = validator(server, executor, ResultCache(), wall)
    token = mint(rsa, server.base(), exp=int(NOW) + 60)
    await check.authenticate(token, AUDIENCE)
    wall.now += 61 + 30  # past exp and the leeway
    with pytest.raises(TokenRefused, match="expired"):
        await check.authenticate(token, AUDIENCE)


async def test_the_cache_holds_at_most_its_bound(
    server: JwksServer, executor: UpstreamExecutor, rsa: RSAKey
) -> None:
    results = ResultCache(max_accepted=3, max_refused=2)
    check = validator(server, executor, results, Clock(NOW))
    tokens = [mint(rsa, server.base(), sub=f"user-{i}") for i in range(5)]
    for token in tokens:
        await check.authenticate(token, AUDIENCE)
    for i in range(4):
        with pytest.raises(TokenRefused):
            await check.authenticate(mint(rsa, server.base(), sub=f"x{i}", aud="nope"), AUDIENCE)
    assert len(results) == 5  # 3 accepted + 2 refused
    oldest, newest = (token_digest(t, AUDIENCE) for t in (tokens[0], tokens[-1]))
    assert results.get(oldest, NOW) is None  # least recently used, evicted
    assert results.get(newest, NOW) is not None


async def test_lasting_refusals_are_remembered_briefly_and_passing_ones_not(
    server: JwksServer, executor: UpstreamExecutor, rsa: RSAKey
) -> None:
    results = ResultCache(refused_ttl_s=10)
    check = validator(server, executor, results, Clock(NOW))
    forged = mint(rsa_key(rsa.kid or ""), server.base())  # same kid, other key
    with pytest.raises(TokenRefused, match="bad_signature"):
        await check.authenticate(forged, AUDIENCE)
    digest = token_digest(forged, AUDIENCE)
    with pytest.raises(TokenRefused, match="bad_signature"):
        results.get(digest, NOW + 9)
    assert results.get(digest, NOW + 10) is None
    unknown = mint(rsa_key("not-yet-published"), server.base())
    with pytest.raises(TokenRefused, match="unknown_key"):
        await check.authenticate(unknown, AUDIENCE)
    assert results.get(token_digest(unknown, AUDIENCE), NOW) is None


def test_an_accepted_entry_is_capped_even_for_a_long_lived_token() -> None:
    results = ResultCache(accepted_cap_s=100)
    principal = Principal("https://idp", "s", None, None, (), frozenset(), NOW + 86_400)
    results.accept(b"d" * 32, principal, NOW)
    assert results.get(b"d" * 32, NOW + 99) == principal
    assert results.get(b"d" * 32, NOW + 100) is None


@pytest.mark.parametrize("audience", [AUDIENCE, OTHER_AUDIENCE, "https://crank.example/mcp/v1/é/ü"])
def test_digest_is_sha256_of_audience_and_token(audience: str) -> None:
    """The per-audience hash is copied, never changed: every digest is the plain
    SHA-256 of ``audience\\0token``, however often an audience is used."""
    import hashlib

    for token in ("a.b.c", "opaque-token", "a.b.c"):
        expected = hashlib.sha256(f"{audience}\0{token}".encode()).digest()
        assert token_digest(token, audience) == expected
    assert token_digest("t", AUDIENCE) != token_digest("t", OTHER_AUDIENCE)
