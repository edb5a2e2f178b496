"""A limit per client address: one token bucket per client, bounded in memory.

Both processes bound attempts that each cost a database query and that
anyone can make for free: the gateway its look-ups of agent keys its
snapshot does not know (mcp_gateway.catalog.lookup_limits), the control
plane its failed admin-token attempts (control_plane.auth). An IPv6 client
counts by its /64 network: one host is usually given a whole /64 and can
pick any address in it. The address is the ASGI scope's client, which behind
the proxies of ``CRANK_TRUSTED_PROXIES`` is the one they forwarded
(shared.forwarded).
"""

from __future__ import annotations

import ipaddress
import time
from collections.abc import Callable

from shared.token_bucket import TokenBuckets

MAX_ADDRESSES = 100_000


def client_of(address: str) -> str:
    """What one client is: its IPv4 address, or the /64 network of its IPv6 address."""
    if ":" not in address:
        return address
    try:
        return str(ipaddress.IPv6Network(f"{address}/64", strict=False))
    except ValueError:
        return address


class AddressLimit:
    """``limit``: (requests, per_seconds), a burst and its refill; None means no limit.
    Ask ``wait_s`` first and ``take`` once the attempt counts, so a request that
    another limit refuses costs this one nothing."""

    def __init__(
        self, limit: tuple[int, int] | None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._limit = limit
        self._buckets: TokenBuckets[str] = TokenBuckets(clock, max_keys=MAX_ADDRESSES)

    def wait_s(self, address: str) -> float:
        """Seconds until ``address`` may try again; 0 when it may now."""
        if self._limit is None:
            return 0.0
        capacity, rate = self._size(self._limit)
        return self._buckets.bucket(client_of(address), capacity, rate).wait_s(1, rate)

    def take(self, address: str) -> None:
        """Count one attempt of ``address``."""
        if self._limit is not None:
            capacity, rate = self._size(self._limit)
            self._buckets.bucket(client_of(address), capacity, rate).take(1, capacity, rate)

    @staticmethod
    def _size(limit: tuple[int, int]) -> tuple[int, float]:
        requests, per_seconds = limit
        return requests, requests / per_seconds
