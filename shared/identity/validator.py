"""The access token check the gateway will call: the result cache first, then
the issuer's keys (refetched once on an unknown kid) and the full validation.

Not yet wired: nothing calls it outside the tests and the bench
(docs/architecture.md, "Identity (in progress)").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from shared.identity.access_tokens import (
    Principal,
    find_key,
    read_header,
    unverified_issuer,
    verify,
)
from shared.identity.issuers import TrustedIssuer
from shared.identity.jwks_cache import JwksCache
from shared.identity.refusals import LASTING_REASONS, TokenRefused
from shared.identity.result_cache import ResultCache, token_digest


class AccessTokenValidator:
    """Tokens of the ``issuers`` an agent trusts, for that agent's ``audience``
    (its canonical endpoint URL, RFC 8707). Raises ``TokenRefused``."""

    def __init__(
        self,
        issuers: Sequence[TrustedIssuer],
        jwks: JwksCache,
        results: ResultCache | None = None,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._issuers = {i.issuer: i for i in issuers}
        self._jwks = jwks
        self._results = results if results is not None else ResultCache()
        self._clock = clock

    async def authenticate(self, token: str, audience: str) -> Principal:
        now = self._clock()
        digest = token_digest(token, audience)
        cached = self._results.get(digest, now)  # raises a remembered refusal
        if cached is not None:
            return cached
        try:
            principal = await self._validate(token, audience, now)
        except TokenRefused as refused:
            if refused.reason in LASTING_REASONS:
                self._results.refuse(digest, refused, now)
            raise
        self._results.accept(digest, principal, now)
        return principal

    async def _validate(self, token: str, audience: str, now: float) -> Principal:
        # The unverified iss only picks the issuer's settings and keys; the
        # signature and the exact iss claim are checked after.
        issuer = self._issuers.get(unverified_issuer(token))
        if issuer is None:
            raise TokenRefused("wrong_issuer")
        header = read_header(token, issuer)
        keys = await self._jwks.keys(issuer.jwks_uri)
        if header.kid is not None and keys.find(header.kid) is None:
            keys = await self._jwks.keys_after_miss(issuer.jwks_uri)
        return verify(token, header, find_key(header, keys), issuer, audience, now)
