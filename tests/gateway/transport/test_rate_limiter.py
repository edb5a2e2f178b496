"""Token buckets per key and method class, sized to a replica's share."""

from __future__ import annotations

import pytest

from mcp_gateway.transport.rate_limits import OTHER_FACTOR, OverCapacity, RateLimiter
from shared.engine.spec import RateLimit
from shared.settings import SettingsError, parse_rate_limit


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def limiter(rank: int = 0, replicas: int = 1) -> tuple[RateLimiter, Clock]:
    clock = Clock()
    return RateLimiter(lambda: (rank, replicas), clock), clock


LIMIT = RateLimit(requests=5, per_seconds=10)


def admitted(rl: RateLimiter, n: int, key: int = 1, limit: RateLimit = LIMIT) -> int:
    return sum(1 for _ in range(n) if rl.take(key, limit, "tools_call") == 0)


def test_a_key_may_burst_up_to_the_limit_then_waits_for_a_refill() -> None:
    rl, clock = limiter()
    assert admitted(rl, 20) == 5
    assert rl.take(1, LIMIT, "tools_call") == 2  # one token every 2 s
    clock.now += 2
    assert admitted(rl, 5) == 1


def test_the_bucket_refills_to_its_size_and_no_further() -> None:
    rl, clock = limiter()
    admitted(rl, 5)
    clock.now += 3600
    assert admitted(rl, 20) == 5


def test_keys_have_buckets_of_their_own() -> None:
    rl, _ = limiter()
    assert admitted(rl, 10, key=1) == 5
    assert admitted(rl, 10, key=2) == 5


def test_other_methods_have_a_separate_larger_bucket() -> None:
    rl, _ = limiter()
    assert admitted(rl, 10) == 5
    other = sum(1 for _ in range(100) if rl.take(1, LIMIT, "other") == 0)
    assert other == 5 * OTHER_FACTOR


def test_no_limit_admits_everything() -> None:
    rl, _ = limiter()
    assert all(rl.take(1, None, "tools_call") == 0 for _ in range(10_000))
    assert len(rl) == 0


def test_retry_after_is_whole_seconds_and_at_least_one() -> None:
    rl, clock = limiter()
    fast = RateLimit(requests=100, per_seconds=1)
    admitted(rl, 100, limit=fast)
    assert rl.take(1, fast, "tools_call") == 1
    clock.now += 0.5
    assert rl.take(1, fast, "tools_call") == 0


@pytest.mark.parametrize("requests", [1, 5, 7, 60, 601])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
def test_the_shares_of_all_replicas_add_up_to_the_limit(requests: int, replicas: int) -> None:
    limit = RateLimit(requests=requests, per_seconds=60)
    total = 0
    for rank in range(replicas):
        rl, _ = limiter(rank, replicas)
        total += admitted(rl, requests * 2, limit=limit)
    # Each share is at least one call, so a limit below the replica count admits one per replica.
    assert total == max(requests, replicas)


def test_a_share_refills_at_its_part_of_the_rate() -> None:
    rl, clock = limiter(rank=0, replicas=2)
    limit = RateLimit(requests=10, per_seconds=10)  # 1/s for the cluster, 0.5/s per replica
    assert admitted(rl, 10, limit=limit) == 5
    assert rl.take(1, limit, "tools_call") == 2
    clock.now += 2
    assert admitted(rl, 3, limit=limit) == 1


def test_a_smaller_limit_after_a_publish_applies_at_once() -> None:
    rl, _ = limiter()
    admitted(rl, 2, limit=RateLimit(requests=100, per_seconds=60))
    assert admitted(rl, 10, limit=RateLimit(requests=3, per_seconds=60)) == 3


def test_full_buckets_are_forgotten() -> None:
    rl, clock = limiter()
    for key in range(100):
        rl.take(key, LIMIT, "tools_call")
    assert len(rl) == 100
    clock.now += 120  # refilled and past the pruning interval
    rl.take(1000, LIMIT, "tools_call")
    assert len(rl) == 1


def test_a_cost_larger_than_the_bucket_is_refused_as_never_passing() -> None:
    rl, _ = limiter(rank=0, replicas=2)  # this replica's share of 5 is 3
    with pytest.raises(OverCapacity) as refused:
        rl.take(1, LIMIT, "tools_call", cost=4)
    assert (refused.value.kind, refused.value.cost, refused.value.capacity) == ("tools_call", 4, 3)
    assert rl.take(1, LIMIT, "tools_call", cost=3) == 0


def test_retry_after_is_the_time_until_the_whole_cost_is_there() -> None:
    rl, clock = limiter()  # 5 at once, one token every 2 s
    assert rl.take(1, LIMIT, "tools_call", cost=5) == 0
    assert rl.take(1, LIMIT, "tools_call", cost=4) == 8
    clock.now += 7.9
    assert rl.take(1, LIMIT, "tools_call", cost=4) == 1  # rounded up: 0.2 s
    clock.now += 0.1
    assert rl.take(1, LIMIT, "tools_call", cost=4) == 0


def test_a_request_of_both_classes_takes_from_both_or_from_neither() -> None:
    rl, clock = limiter()
    assert rl.take(1, LIMIT, "tools_call", cost=5) == 0
    # The tools/call bucket is empty: nothing is taken from the other one.
    assert rl.admit(1, LIMIT, {"tools_call": 1, "other": 50}) == 2
    assert rl.take(1, LIMIT, "other", cost=50) == 0
    # tools/call has a token again in 2 s, the other bucket 50 in 10 s: the later one counts.
    assert rl.admit(1, LIMIT, {"tools_call": 1, "other": 50}) == 10
    clock.now += 10
    assert rl.admit(1, LIMIT, {"tools_call": 1, "other": 50}) == 0


@pytest.mark.parametrize(
    ("raw", "parsed"), [("60/60", (60, 60)), (" 5/1 ", (5, 1)), ("off", None), ("OFF", None)]
)
def test_crank_rate_limit_reads_requests_per_seconds_or_off(
    raw: str, parsed: tuple[int, int] | None
) -> None:
    assert parse_rate_limit(raw) == parsed


@pytest.mark.parametrize("raw", ["60", "60/", "/60", "a/b", "0/60", "10/0", "10/86401", "-1/5"])
def test_an_unreadable_crank_rate_limit_is_refused(raw: str) -> None:
    with pytest.raises(SettingsError, match="CRANK_RATE_LIMIT"):
        parse_rate_limit(raw)
