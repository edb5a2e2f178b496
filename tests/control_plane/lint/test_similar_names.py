"""The similar-tools rule's cheap bounds change no answer of difflib's ratio."""

from __future__ import annotations

import random
from difflib import SequenceMatcher

from control_plane.lint.agent_rules import NAME_RATIO, _Name, _name_key, _similar_names

_PARTS = ["get", "list", "order", "orders", "user", "users", "by", "id", "v2", "item", "a", "s"]


def ratio_alone(a: str, b: str) -> bool:
    """The rule as difflib states it, with no shortcut."""
    if _name_key(a) == _name_key(b):
        return True
    return SequenceMatcher(None, a.lower(), b.lower(), autojunk=False).ratio() >= NAME_RATIO


def test_the_bounds_answer_as_the_ratio_alone_does() -> None:
    rng = random.Random(8)
    names = ["_".join(rng.choices(_PARTS, k=rng.randint(1, 4))) for _ in range(300)]
    names += [name + rng.choice(["", "x", "s", "_v3"]) for name in names[:100]]
    similar = 0
    for _ in range(20_000):
        a, b = rng.sample(names, 2)
        expected = ratio_alone(a, b)
        assert _similar_names(_Name(a), _Name(b)) is expected, (a, b)
        similar += expected
    assert similar > 100  # both answers are exercised
