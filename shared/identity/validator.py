"""The access token check: the result cache first, then a JWT's issuer keys
(refetched once on an unknown kid) and the full validation, or, for an opaque
token, the introspecting issuer's endpoint. The gateway calls it through an
agent's ``provider_sets.ProviderSet`` (docs/architecture.md, "Identity").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence

from shared.identity.access_tokens import (
    Principal,
    find_key,
    looks_like_jwt,
    read_header,
    unverified_issuer,
    verify,
)
from shared.identity.fetching import Post
from shared.identity.introspection import introspect, opaque_token_shape_ok
from shared.identity.issuers import IssuerConfigError, TrustedIssuer
from shared.identity.jwks_cache import JwksCache
from shared.identity.refusals import LASTING_REASONS, TokenRefused
from shared.identity.result_cache import ResultCache, token_digest
from shared.token_bucket import TokenBuckets

DEFAULT_INTROSPECTION_CACHE_S = 60.0  # how long a revoked opaque token may still pass
DEFAULT_INTROSPECTION_RATE = 20.0  # introspections per second per process, after the burst
DEFAULT_INTROSPECTION_BURST = 50.0


class AccessTokenValidator:
    """Tokens of the ``issuers`` an agent trusts, for that agent's ``audience``
    (its canonical endpoint URL, RFC 8707). Raises ``TokenRefused``."""

    def __init__(
        self,
        issuers: Sequence[TrustedIssuer],
        jwks: JwksCache,
        results: ResultCache | None = None,
        *,
        post: Post | None = None,
        introspection_cache_s: float = DEFAULT_INTROSPECTION_CACHE_S,
        introspection_rate: float = DEFAULT_INTROSPECTION_RATE,
        introspection_burst: float = DEFAULT_INTROSPECTION_BURST,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._issuers = {i.issuer: i for i in issuers}
        introspecting = [i for i in issuers if i.introspection is not None]
        # An opaque token names no issuer: with two endpoints, one would see the
        # other's tokens.
        if len(introspecting) > 1:
            raise IssuerConfigError("introspection: at most one issuer per agent")
        if introspecting and post is None:
            raise IssuerConfigError("introspection: configured, but no way to post")
        self._introspecting = introspecting[0] if introspecting else None
        self._jwks = jwks
        self._results = results if results is not None else ResultCache()
        self._post = post
        self._introspection_cache_s = introspection_cache_s
        self._rate = introspection_rate
        self._burst = introspection_burst
        self._budget: TokenBuckets[str] = TokenBuckets(monotonic)
        self._in_flight: dict[bytes, asyncio.Task[Principal]] = {}
        self._clock = clock

    def remembered(self, token: str, audience: str) -> Principal | None:
        """The principal of a token this validator accepted and still remembers,
        without an await (the hot path); raises a remembered refusal; None: ask
        ``authenticate``."""
        return self._results.get(token_digest(token, audience), self._clock())

    async def authenticate(self, token: str, audience: str) -> Principal:
        now = self._clock()
        digest = token_digest(token, audience)
        cached = self._results.get(digest, now)  # raises a remembered refusal
        if cached is not None:
            return cached
        try:
            if looks_like_jwt(token):
                principal = await self._validate_jwt(token, audience, now)
                self._results.accept(digest, principal, now)
            else:
                principal = await self._introspect_once(digest, token, audience, now)
                self._results.accept(digest, principal, now, cap_s=self._introspection_cache_s)
        except TokenRefused as refused:
            if refused.reason in LASTING_REASONS:
                self._results.refuse(digest, refused, now)
            raise
        return principal

    async def _validate_jwt(self, token: str, audience: str, now: float) -> Principal:
        # The unverified iss only picks the issuer's settings and keys; the
        # signature and the exact iss claim are checked after.
        issuer = self._issuers.get(unverified_issuer(token))
        if issuer is None:
            raise TokenRefused("wrong_issuer")
        header = read_header(token, issuer)
        if issuer.jwks_uri is None:
            raise TokenRefused("keys_unavailable", "the issuer publishes no JWKS here")
        keys = await self._jwks.keys(issuer.jwks_uri)
        if header.kid is not None and keys.find(header.kid) is None:
            keys = await self._jwks.keys_after_miss(issuer.jwks_uri)
        return verify(token, header, find_key(header, keys), issuer, audience, now)

    async def _introspect_once(
        self, digest: bytes, token: str, audience: str, now: float
    ) -> Principal:
        """Concurrent calls with one token share one introspection; new ones spend
        the process's budget, so a flood of made-up tokens cannot flood the IdP."""
        issuer, post = self._introspecting, self._post
        if issuer is None or post is None:
            raise TokenRefused("malformed", "not a JWT")
        if not opaque_token_shape_ok(token):
            # Refused before the budget: a token that may never leave Crank must not
            # spend what real opaque tokens need.
            raise TokenRefused("malformed", "not a bearer token")
        task = self._in_flight.get(digest)
        if task is None:
            bucket = self._budget.bucket("introspection", self._burst, self._rate)
            if bucket.wait_s(1, self._rate) > 0:
                raise TokenRefused("introspection_unavailable", "over the introspection budget")
            bucket.take(1, self._burst, self._rate)
            task = asyncio.create_task(
                introspect(token, issuer, audience, post, now, cache_s=self._introspection_cache_s)
            )
            self._in_flight[digest] = task
            task.add_done_callback(lambda _: self._in_flight.pop(digest, None))
        return await asyncio.shield(task)
