"""How many database look-ups of keys the snapshot does not know one process makes.

The key checksum is public, so anyone can make well-formed keys that pass the
format check; each one the snapshot does not know would cost a query. Two
token buckets bound that (docs/architecture.md, "Keys"):

- per process (``CRANK_KEY_LOOKUP_LIMIT``): past it the answer is 503 with
  ``Retry-After``, the time until the bucket holds a look-up again, since a
  key created a moment ago may be among those waiting;
- per client address (``CRANK_KEY_LOOKUP_LIMIT_PER_ADDRESS``, shared.address_limit):
  past it the answer is the 401 of an unknown key, so one address cannot use
  up the process's look-ups for everyone else.

Neither refusal makes a query.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Literal, NamedTuple

from shared.address_limit import AddressLimit
from shared.token_bucket import TokenBuckets, retry_after_s


class Refusal(NamedTuple):
    """Why a look-up may not run now; ``retry_after_s``: when the process may make one."""

    reason: Literal["address", "process"]
    retry_after_s: int = 0


class LookupLimits:
    """``take``: None when a look-up may run now, else why not. Limits are
    (requests, per_seconds) bursts and refills; None means no limit."""

    def __init__(
        self,
        per_process: tuple[int, int] | None,
        per_address: tuple[int, int] | None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._per_process = per_process
        self._process: TokenBuckets[None] = TokenBuckets(clock)
        self._addresses = AddressLimit(per_address, clock)

    def take(self, address: str) -> Refusal | None:
        if self._addresses.wait_s(address) > 0:
            return Refusal("address")
        if self._per_process is not None:
            capacity, rate = _size(self._per_process)
            process_bucket = self._process.bucket(None, capacity, rate)
            wait = process_bucket.wait_s(1, rate)
            if wait > 0:
                return Refusal("process", retry_after_s(wait))
            process_bucket.take(1, capacity, rate)
        self._addresses.take(address)
        return None


def _size(limit: tuple[int, int]) -> tuple[int, float]:
    requests, per_seconds = limit
    return requests, requests / per_seconds
