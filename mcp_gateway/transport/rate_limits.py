"""Per-key rate limits, answered from memory (no database on the hot path).

``RateLimiter`` keeps two token buckets per key (tools/call, everything else), sized to
this replica's share; ``admit`` takes from all of a request's buckets or from none, and
``OverCapacity`` is a request no wait could admit (docs/architecture.md, "Rate limits
across replicas").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Literal

from shared.engine.spec import RateLimit
from shared.token_bucket import TokenBuckets, retry_after_s

MethodClass = Literal["tools_call", "other"]
OTHER_FACTOR = 10  # the cap on non-tools/call requests, relative to the tools/call limit


class OverCapacity(Exception):
    """One request needs more tokens than this replica's bucket holds: it can never pass
    here, so waiting would not help (a JSON-RPC batch larger than the share)."""

    def __init__(self, kind: MethodClass, cost: int, capacity: int) -> None:
        super().__init__(f"{cost} {kind} tokens needed, {capacity} held")
        self.kind = kind
        self.cost = cost
        self.capacity = capacity


class RateLimiter:
    """Token buckets per (key, method class), sized to this replica's share."""

    def __init__(
        self,
        share: Callable[[], tuple[int, int]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._share = share  # () -> (rank, live replicas); rank in [0, replicas)
        self._buckets: TokenBuckets[tuple[int, MethodClass]] = TokenBuckets(clock)

    def take(self, key_id: int, limit: RateLimit | None, kind: MethodClass, cost: int = 1) -> int:
        """``admit`` of one method class."""
        return self.admit(key_id, limit, {kind: cost})

    def admit(self, key_id: int, limit: RateLimit | None, costs: Mapping[MethodClass, int]) -> int:
        """Take ``costs`` from the key's buckets, all or nothing: 0 when admitted, else the
        whole seconds until all of them could be taken. Raises OverCapacity when a cost is
        larger than its bucket."""
        if limit is None:
            return 0
        rank, replicas = self._share()
        wanted = []
        wait = 0.0
        for kind, cost in costs.items():
            if cost <= 0:
                continue
            requests = limit.requests * (OTHER_FACTOR if kind == "other" else 1)
            capacity = max(1, requests // replicas + (1 if rank < requests % replicas else 0))
            if cost > capacity:
                raise OverCapacity(kind, cost, capacity)
            rate = requests / limit.per_seconds / replicas  # tokens per second
            bucket = self._buckets.bucket((key_id, kind), capacity, rate)
            wait = max(wait, bucket.wait_s(cost, rate))
            wanted.append((bucket, cost, capacity, rate))
        if wait > 0:
            return retry_after_s(wait)
        for bucket, cost, capacity, rate in wanted:
            bucket.take(cost, capacity, rate)
        return 0

    def __len__(self) -> int:
        return len(self._buckets)
