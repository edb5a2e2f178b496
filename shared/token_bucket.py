"""Token buckets by key: the one refill-and-take rule of every limit Crank keeps in memory.

A bucket holds up to ``capacity`` tokens and refills at ``rate`` tokens per
second. Callers first ask how long ``cost`` tokens take to be there
(``wait_s``), so that a request needing tokens from several buckets takes
from none of them when one says no, then ``take``. A bucket that has
refilled is forgotten: a new one is identical, so memory holds only the keys
that were busy lately.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)

_PRUNE_EVERY_S = 60.0


@dataclass(slots=True)
class TokenBucket:
    tokens: float
    updated: float  # the clock's time of the last refill
    full_at: float  # when it is full again if left alone; then it can be forgotten

    def wait_s(self, cost: float, rate: float) -> float:
        """Seconds until ``cost`` tokens are there; 0 when they are there now."""
        return max(0.0, (cost - self.tokens) / rate)

    def take(self, cost: float, capacity: float, rate: float) -> None:
        self.tokens -= cost
        self.full_at = self.updated + (capacity - self.tokens) / rate


def retry_after_s(wait_s: float) -> int:
    """What ``Retry-After`` says for a wait: whole seconds, rounded up, at least 1."""
    return max(1, math.ceil(wait_s))


class TokenBuckets(Generic[K]):
    """Buckets by key; ``max_keys`` bounds the memory even while every bucket is busy."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, *, max_keys: int | None = None
    ) -> None:
        self._clock = clock
        self._max_keys = max_keys
        self._buckets: dict[K, TokenBucket] = {}
        self._pruned = clock()

    def bucket(self, key: K, capacity: float, rate: float) -> TokenBucket:
        """``key``'s bucket, refilled up to now (a new key's is full)."""
        now = self._clock()
        if now - self._pruned >= _PRUNE_EVERY_S or (
            self._max_keys is not None and len(self._buckets) >= self._max_keys
        ):
            self._prune(now)
        bucket = self._buckets.get(key)
        if bucket is None:
            bucket = self._buckets[key] = TokenBucket(capacity, now, now)
        else:
            bucket.tokens = min(capacity, bucket.tokens + (now - bucket.updated) * rate)
            bucket.updated = now
        return bucket

    def _prune(self, now: float) -> None:
        self._pruned = now
        for key in [key for key, bucket in self._buckets.items() if bucket.full_at <= now]:
            del self._buckets[key]
        if self._max_keys is not None and len(self._buckets) >= self._max_keys:
            # Every bucket is busy: start over rather than grow. A caller that bounds a
            # shared resource keeps a second, unkeyed bucket, which this does not reset.
            self._buckets.clear()

    def __len__(self) -> int:
        return len(self._buckets)
