"""Back-off delays: the two shapes every retry loop in Crank uses.

``equal_jitter`` is the wait before a retry that many callers may make at
once (an upstream call, a webhook delivery): exponential, capped, half of it
fixed and half random, so retries spread out but never come sooner than half
the back-off. ``doubled`` is the next wait of a loop that retries one thing
of its own (a background task, a write, a reconnect): twice the last, capped.
"""

from __future__ import annotations

import random


def equal_jitter(attempt: int, *, base_s: float, cap_s: float, rng: random.Random) -> float:
    """The wait after failed attempt ``attempt`` (1 for the first): ``base_s`` doubled
    per earlier attempt, at most ``cap_s``; half of that fixed, half random."""
    ceiling = min(cap_s, base_s * 2.0 ** (attempt - 1))
    return ceiling / 2 + rng.uniform(0, ceiling / 2)


def doubled(delay_s: float, cap_s: float) -> float:
    """The wait after ``delay_s``: twice as long, at most ``cap_s``."""
    return min(delay_s * 2, cap_s)


__all__ = ["doubled", "equal_jitter"]
