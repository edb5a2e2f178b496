"""Each issuer's metadata (RFC 8414 / OpenID discovery), kept in memory: fetched
when first needed, refreshed after a TTL in the background, one fetch at a time,
none within the retry interval of the last, and the last good document kept
while the IdP is unreachable (docs/architecture.md, "Identity")."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from shared.identity.discovery import DiscoveryFailed, ProviderMetadata, discover
from shared.identity.fetching import Fetch

log = structlog.get_logger(__name__)

DEFAULT_TTL_S = 3_600.0  # a jwks_uri moves rarely; keys rotate in the JWKS, not here
DEFAULT_RETRY_INTERVAL_S = 30.0
DEFAULT_FETCH_TIMEOUT_S = 10.0


class MetadataUnavailable(Exception):
    """No metadata document of this issuer was ever fetched."""


@dataclass(slots=True)
class _Entry:
    metadata: ProviderMetadata | None = None
    fetched_at: float = float("-inf")
    attempted_at: float = float("-inf")
    in_flight: asyncio.Task[None] | None = None
    failing: bool = False  # logged once per outage


class MetadataCache:
    """Provider metadata by issuer. ``generation`` grows whenever a document
    changes, so holders of derived settings (``provider_sets``) notice with an
    integer comparison."""

    def __init__(
        self,
        fetch: Fetch,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        retry_interval_s: float = DEFAULT_RETRY_INTERVAL_S,
        fetch_timeout_s: float = DEFAULT_FETCH_TIMEOUT_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._ttl_s = ttl_s
        self._interval_s = retry_interval_s
        self._timeout_s = fetch_timeout_s
        self._clock = clock
        self._entries: dict[str, _Entry] = {}
        self.generation = 0

    def known(self, issuer: str) -> ProviderMetadata | None:
        """The last good document, without waiting; starts a refresh when it is old."""
        entry = self._entries.get(issuer)
        if entry is None or entry.metadata is None:
            return None
        if self._clock() - entry.fetched_at >= self._ttl_s:
            self._start_fetch(issuer, entry)
        return entry.metadata

    async def metadata(self, issuer: str) -> ProviderMetadata:
        """The issuer's document; waits for the first fetch. Raises MetadataUnavailable."""
        known = self.known(issuer)
        if known is not None:
            return known
        entry = self._entries.setdefault(issuer, _Entry())
        self._start_fetch(issuer, entry)
        if entry.in_flight is not None:
            await asyncio.shield(entry.in_flight)  # one caller giving up cancels no one's fetch
        if entry.metadata is None:
            raise MetadataUnavailable(issuer)
        return entry.metadata

    def _start_fetch(self, issuer: str, entry: _Entry) -> None:
        if entry.in_flight is None and self._clock() - entry.attempted_at >= self._interval_s:
            entry.attempted_at = self._clock()
            entry.in_flight = asyncio.create_task(self._fetch_into(issuer, entry))

    async def _fetch_into(self, issuer: str, entry: _Entry) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                metadata = await discover(issuer, self._fetch)
        except Exception as exc:  # any failure: the last good document stays in use
            if not entry.failing:
                log.warning(
                    "identity_metadata_failed",
                    issuer=issuer,
                    error=str(exc)[:300]
                    if isinstance(exc, DiscoveryFailed)
                    else type(exc).__name__,
                    keeping_last_good=entry.metadata is not None,
                )
                entry.failing = True
        else:
            if entry.failing:
                log.info("identity_metadata_recovered", issuer=issuer)
            if metadata != entry.metadata:
                self.generation += 1
            entry.metadata, entry.fetched_at, entry.failing = metadata, self._clock(), False
        finally:
            entry.in_flight = None
