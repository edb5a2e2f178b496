from __future__ import annotations

import random

from shared.backoff import doubled, equal_jitter


def test_equal_jitter_is_half_fixed_half_random_doubling_up_to_the_cap() -> None:
    rng = random.Random(7)
    for attempt, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (5, 1.0), (40, 1.0)]:
        waits = [equal_jitter(attempt, base_s=0.1, cap_s=1.0, rng=rng) for _ in range(200)]
        assert all(ceiling / 2 <= wait <= ceiling for wait in waits)
        assert max(waits) - min(waits) > ceiling / 4  # the random half is used


def test_doubled_doubles_up_to_the_cap() -> None:
    delays = [0.25]
    for _ in range(5):
        delays.append(doubled(delays[-1], 2.0))
    assert delays == [0.25, 0.5, 1.0, 2.0, 2.0, 2.0]
