"""The look-up limits of keys the snapshot does not know, on a clock the test moves."""

from __future__ import annotations

from mcp_gateway.catalog.lookup_limits import LookupLimits, Refusal


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_an_address_past_its_limit_is_refused_and_others_are_not() -> None:
    clock = Clock()
    limits = LookupLimits(None, (2, 10), clock)  # 2 at once, one every 5 s
    assert [limits.take("198.51.100.1") for _ in range(3)] == [None, None, Refusal("address")]
    assert limits.take("198.51.100.2") is None
    clock.now += 5
    assert limits.take("198.51.100.1") is None


def test_an_ipv6_client_counts_by_its_64_network() -> None:
    limits = LookupLimits(None, (1, 100))
    assert limits.take("2001:db8:1:2::1") is None
    assert limits.take("2001:db8:1:2:ffff::9") == Refusal("address")
    assert limits.take("2001:db8:1:3::1") is None


def test_past_the_process_limit_the_refusal_says_when_the_next_look_up_may_run() -> None:
    clock = Clock()
    limits = LookupLimits((3, 30), None, clock)  # 3 at once, one every 10 s
    assert [limits.take(f"a{n}") for n in range(3)] == [None, None, None]
    assert limits.take("a4") == Refusal("process", 10)
    clock.now += 9.5
    assert limits.take("a4") == Refusal("process", 1)
    clock.now += 0.5
    assert limits.take("a4") is None


def test_a_refusal_by_the_process_takes_nothing_from_the_address() -> None:
    clock = Clock()
    limits = LookupLimits((1, 100), (2, 100), clock)
    assert limits.take("a") is None
    assert limits.take("a").reason == "process"  # type: ignore[union-attr]
    clock.now += 100  # the process refilled; "a" still holds its second look-up
    assert limits.take("a") is None
    assert limits.take("b") == Refusal("process", 100)


def test_no_limits_admit_everything() -> None:
    limits = LookupLimits(None, None)
    assert all(limits.take("a") is None for _ in range(10_000))
