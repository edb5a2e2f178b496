"""Each issuer's key set, kept in memory: refreshed after a TTL, refetched on an
unknown ``kid`` at most once per interval (but at once after a good fetch made for
another reason), one fetch at a time, and the last good set kept while the IdP is
unreachable (docs/architecture.md, "Identity")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from shared.identity.fetching import Fetch, FetchFailed
from shared.identity.key_sets import KeySetInvalid, VerificationKeys, parse_jwks
from shared.identity.refusals import TokenRefused

log = structlog.get_logger(__name__)

DEFAULT_TTL_S = 600.0
DEFAULT_REFETCH_INTERVAL_S = 30.0
DEFAULT_FETCH_TIMEOUT_S = 10.0


@dataclass(slots=True)
class _IssuerKeys:
    keys: VerificationKeys | None = None
    fetched_at: float = float("-inf")  # of the last good set
    attempted_at: float = float("-inf")  # of the last fetch, good or not
    missed_at: float = float("-inf")  # of the last fetch an unknown kid started
    in_flight: asyncio.Task[None] | None = None
    failing: bool = False  # logged once per outage


class JwksCache:
    """Key sets by JWKS URL. ``keys`` is a dict look-up while the set is fresh."""

    def __init__(
        self,
        fetch: Fetch,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        refetch_interval_s: float = DEFAULT_REFETCH_INTERVAL_S,
        fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._ttl_s = ttl_s
        self._interval_s = refetch_interval_s
        self._timeout_s = fetch_timeout_s
        self._clock = clock
        self._sets: dict[str, _IssuerKeys] = {}

    async def keys(self, jwks_uri: str) -> VerificationKeys:
        """The current set. With none yet, the caller waits for the fetch; an older
        set than the TTL is still answered while a refetch runs in the background
        (no call waits on the IdP every ``ttl_s``)."""
        entry = self._sets.get(jwks_uri)
        if entry is None or entry.keys is None:
            return await self._refreshed(jwks_uri)
        if self._clock() - entry.fetched_at >= self._ttl_s:
            self._start_fetch(jwks_uri, entry)
        return entry.keys

    async def keys_after_miss(self, jwks_uri: str) -> VerificationKeys:
        """A token named a key the set lacks (the IdP may have rotated): refetch,
        unless a miss refetched within the refetch interval, or the last fetch
        failed within it; concurrent misses share one fetch. A good set fetched
        for another reason (first use, the TTL) does not hold a rotation back:
        an IdP that rotates right after it would otherwise see its new tokens
        refused for up to the interval."""
        entry = self._sets.setdefault(jwks_uri, _IssuerKeys())
        if entry.in_flight is None and self._miss_may_fetch(entry):
            entry.missed_at = self._clock()
            self._begin_fetch(jwks_uri, entry)
        return await self._refreshed(jwks_uri)

    def _miss_may_fetch(self, entry: _IssuerKeys) -> bool:
        now = self._clock()
        if now - entry.missed_at < self._interval_s:
            return False  # made-up kids cost the IdP one fetch per interval
        if entry.keys is None or entry.failing:
            return now - entry.attempted_at >= self._interval_s  # an IdP that is down
        return True

    async def _refreshed(self, jwks_uri: str) -> VerificationKeys:
        entry = self._sets.setdefault(jwks_uri, _IssuerKeys())
        self._start_fetch(jwks_uri, entry)
        if entry.in_flight is not None:
            # shield: a caller that gives up does not cancel the others' fetch.
            await asyncio.shield(entry.in_flight)
        if entry.keys is None:
            raise TokenRefused("keys_unavailable")
        return entry.keys

    def _start_fetch(self, jwks_uri: str, entry: _IssuerKeys) -> None:
        """One fetch at a time per set, and none within the interval of the last."""
        if entry.in_flight is None and self._clock() - entry.attempted_at >= self._interval_s:
            self._begin_fetch(jwks_uri, entry)

    def _begin_fetch(self, jwks_uri: str, entry: _IssuerKeys) -> None:
        entry.attempted_at = self._clock()
        entry.in_flight = asyncio.create_task(self._fetch_into(jwks_uri, entry))

    async def _fetch_into(self, jwks_uri: str, entry: _IssuerKeys) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                body = await self._fetch(jwks_uri)
            keys = parse_jwks(body)
        except Exception as exc:  # any failure: the last good set must stay in use
            if not entry.failing:
                # The URL and the failure only: a JWKS holds no secret, the error no token.
                log.warning(
                    "jwks_fetch_failed",
                    jwks_uri=jwks_uri,
                    error=_describe(exc),
                    keeping_last_good=entry.keys is not None,
                )
                entry.failing = True
        else:
            if entry.failing:
                log.info("jwks_fetch_recovered", jwks_uri=jwks_uri)
            entry.keys, entry.fetched_at, entry.failing = keys, self._clock(), False
        finally:
            entry.in_flight = None


def _describe(exc: Exception) -> str:
    # Our own failures say what went wrong; anything else only by its type.
    if isinstance(exc, FetchFailed | KeySetInvalid):
        return str(exc)[:200]
    if isinstance(exc, TimeoutError):
        return "timed out"
    return type(exc).__name__
