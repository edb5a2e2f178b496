"""Per-key rate limits, answered from memory (no database on the hot path).

Each API key has two token buckets in every gateway process:

- ``tools_call``: the agent's ``rate_limit`` ({requests, per_seconds}), else
  ``CRANK_RATE_LIMIT``. A key may make up to ``requests`` calls at once, then
  ``requests / per_seconds`` per second.
- ``other``: every other MCP request of the key (initialize, ping, tools/list,
  discovery, notifications, GET, DELETE), ten times the tools/call limit, so
  a client that loops on tools/list is stopped too.

Across replicas each process enforces its share (mcp_gateway.upkeep.replicas): the
refill rate divided by the live processes N, and the bucket split by rank so
that the shares add up to exactly ``requests`` (each share at least one
call). With traffic spread evenly the cluster admits the limit within one
call per replica; traffic that sticks to one replica gets only that
replica's share (stricter, never looser). docs/mcp-interface.md states the
tolerance; tests/gateway/transport/test_rate_limits.py checks it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from shared.engine.spec import RateLimit

MethodClass = Literal["tools_call", "other"]
OTHER_FACTOR = 10  # the cap on non-tools/call requests, relative to the tools/call limit
_PRUNE_EVERY_S = 60.0


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float  # time.monotonic()
    full_at: float  # when it will be full again if left alone; then it can be forgotten


class RateLimiter:
    """Token buckets per (key, method class), sized to this replica's share."""

    def __init__(
        self,
        share: Callable[[], tuple[int, int]],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._share = share  # () -> (rank, live replicas); rank in [0, replicas)
        self._clock = clock
        self._buckets: dict[tuple[int, MethodClass], _Bucket] = {}
        self._pruned = clock()

    def take(self, key_id: int, limit: RateLimit | None, kind: MethodClass, cost: int = 1) -> int:
        """Take ``cost`` tokens; 0 when admitted, else whole seconds to wait."""
        if limit is None:
            return 0
        requests = limit.requests * (OTHER_FACTOR if kind == "other" else 1)
        rank, replicas = self._share()
        capacity = max(1, requests // replicas + (1 if rank < requests % replicas else 0))
        rate = requests / limit.per_seconds / replicas  # tokens per second
        now = self._clock()
        bucket = self._buckets.get((key_id, kind))
        if bucket is None:
            bucket = self._buckets[(key_id, kind)] = _Bucket(capacity, now, now)
        else:
            bucket.tokens = min(capacity, bucket.tokens + (now - bucket.updated) * rate)
            bucket.updated = now
        if bucket.tokens >= cost:
            bucket.tokens -= cost
            bucket.full_at = now + (capacity - bucket.tokens) / rate
            admitted = 0
        else:
            admitted = max(1, math.ceil((min(cost, capacity) - bucket.tokens) / rate))
        if now - self._pruned >= _PRUNE_EVERY_S:
            self._prune(now)
        return admitted

    def _prune(self, now: float) -> None:
        """Forget buckets that have refilled: a fresh one is identical."""
        self._pruned = now
        for key in [key for key, bucket in self._buckets.items() if bucket.full_at <= now]:
            del self._buckets[key]

    def __len__(self) -> int:
        return len(self._buckets)
