"""The plain-dict fast paths of shared.engine.jmes answer exactly what jmespath answers."""

from __future__ import annotations

import random
from typing import Any

import jmespath
import pytest

from shared.engine.jmes import _Hash, _Path, compile_expression

FAST = [
    "base",
    '"quoted-name"',
    "a.b",
    "a.b.c",
    "rates.EUR",
    '"a b"."c.d"',
    "{base: base, date: date}",
    "{base: base, date: date, rates: rates}",
    "{symbols: quote}",
    "{x: a.b, y: c, z: a}",
    '{"odd key": a, a: a}',
    "{a: a, a: b}",
]
SLOW = ["a[0]", "[a, b]", "a || b", "length(a)", "{a: a[0]}", "a.[b]", "@", "a.*", "{a: `1`}"]


def _values(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 0:
        return None
    if kind == 1:
        return rng.choice([True, False])
    if kind == 2:
        return rng.randint(-3, 3)
    if kind == 3:
        return rng.choice([0.5, 1.0, -2.25])
    if kind == 4:
        return rng.choice(["", "a", "USD", "x y"])
    if kind == 5:
        return {}
    if kind == 6:
        return [_values(rng, depth + 1) for _ in range(rng.randrange(3))]
    keys = ["a", "b", "c", "d", "base", "date", "rates", "quote", "EUR", "odd key", "quoted-name"]
    keys += ["a b", "c.d"]
    return {k: _values(rng, depth + 1) for k in rng.sample(keys, rng.randrange(1, 6))}


def _inputs() -> list[Any]:
    rng = random.Random(20261130)
    fixed: list[Any] = [
        None,
        0,
        "text",
        [],
        [{"a": 1}],
        {},
        {"a": None},
        {"a": {"b": None}},
        {"a": {"b": {"c": 0}}},
        {"a": "str"},
        {"a": [1, 2]},
        {"base": "USD", "date": "2026-01-02", "rates": {"EUR": 0.9}, "amount": 1.0},
        {"a b": {"c.d": False}},
    ]
    return fixed + [_values(rng) for _ in range(500)]


@pytest.mark.parametrize("expression", FAST)
def test_identifier_paths_and_hashes_compile_to_the_fast_path(expression: str) -> None:
    assert isinstance(compile_expression(expression), _Path | _Hash)


@pytest.mark.parametrize("expression", SLOW)
def test_everything_else_is_jmespath_itself(expression: str) -> None:
    assert not isinstance(compile_expression(expression), _Path | _Hash)


@pytest.mark.parametrize("expression", FAST + SLOW)
def test_fast_path_answers_what_jmespath_answers(expression: str) -> None:
    reference = jmespath.compile(expression)
    compiled = compile_expression(expression)
    for value in _inputs():
        try:
            expected = reference.search(value)
        except jmespath.exceptions.JMESPathError as exc:
            with pytest.raises(type(exc)):
                compiled.search(value)
            continue
        got = compiled.search(value)
        assert got == expected, (expression, value)
        assert type(got) is type(expected), (expression, value)


def test_a_field_returns_the_value_itself_not_a_copy() -> None:
    inner = {"EUR": 0.9}
    assert compile_expression("rates").search({"rates": inner}) is inner


def test_a_bad_expression_raises_as_jmespath_does() -> None:
    with pytest.raises(jmespath.exceptions.ParseError):
        compile_expression("{a: }")
