"""The nesting bound checked on JSON text before any parser recurses."""

from __future__ import annotations

import json

import pytest

from shared.json_depth import nests_deeper_than


@pytest.mark.parametrize(
    ("value", "depth"),
    [
        ({}, 1),
        ([1, [2, [3]]], 3),
        ({"a": [{"b": {}}]}, 4),
        ([[]] * 1000, 2),
        ({"s": "[[[[{{{{" * 100}, 1),
        ({"s": 'a \\" [[[[ "' * 10, "t": [[]]}, 3),
    ],
)
def test_the_depth_is_that_of_arrays_and_objects_not_of_brackets_in_strings(
    value: object, depth: int
) -> None:
    text = json.dumps(value).encode()
    assert not nests_deeper_than(text, depth)
    assert nests_deeper_than(text, depth - 1)


def test_a_deep_text_is_found_deep() -> None:
    assert nests_deeper_than(b"[" * 100_000 + b"]" * 100_000, 64)
    assert not nests_deeper_than(b"[" * 64 + b"]" * 64, 64)
