"""shared.engine.schema_fast_path accepts only what jsonschema accepts, and covers the usual shapes."""

from __future__ import annotations

import random
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from shared.engine.compiler import ArgumentValidator
from shared.engine.errors import ToolError
from shared.engine.schema_fast_path import compile_fast_check

RATES = {
    "type": "object",
    "properties": {
        "base": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "from"},
        "quote": {"type": "string", "pattern": "^[A-Z]{3}$"},
    },
    "required": ["base", "quote"],
    "additionalProperties": False,
}
COVERED: list[dict[str, Any]] = [
    RATES,
    {"type": "object"},
    {},
    {"properties": {"n": {"type": "integer", "minimum": 1, "maximum": 10}}},
    {
        "type": "object",
        "properties": {
            "x": {"type": ["number", "null"], "exclusiveMinimum": 0, "exclusiveMaximum": 1.5},
            "s": {"type": "string", "minLength": 2, "maxLength": 3, "title": "S"},
            "e": {"enum": ["a", "b", "1"]},
            "b": {"type": "boolean", "default": False},
            "o": {"type": "object"},
            "l": {"type": "array"},
            "p": {"pattern": "b"},
            "m": {"minimum": 2, "minLength": 1},
        },
        "required": ["s"],
    },
]
NOT_COVERED: list[dict[str, Any]] = [
    {"type": "array"},
    {"properties": {"d": {"type": "string", "format": "date"}}},
    {"properties": {"c": {"const": "x"}}},
    {"properties": {"l": {"type": "array", "items": {"type": "string"}}}},
    {"properties": {"r": {"$ref": "#/$defs/r"}}, "$defs": {"r": {"type": "string"}}},
    {"properties": {"e": {"enum": ["a", 1]}}},
    {"properties": {"t": {"type": "decimal"}}},
    {"additionalProperties": {"type": "string"}},
    {"patternProperties": {"^x": {"type": "string"}}},
    {"$schema": "http://json-schema.org/draft-07/schema#"},
    {"properties": {"x": {"nullable": True}}},
    {"properties": {"p": {"pattern": "("}}},
]
NAMES = ["base", "quote", "n", "x", "s", "e", "b", "o", "l", "p", "m", "extra"]
VALUES: list[Any] = [
    None, True, False, 0, 1, 2, 10, 11, -1, 0.0, 0.5, 1.0, 1.5, 2.0, 1e300,
    "", "a", "b", "1", "ab", "abc", "abcd", "USD", "usd", "EURO", "XUSD", "é", "ab\n",
    [], ["a"], {}, {"a": 1},
]  # fmt: skip


def _instances() -> list[dict[str, Any]]:
    rng = random.Random(4)
    found: list[dict[str, Any]] = [{}, {"base": "USD", "quote": "EUR"}]
    for _ in range(3000):
        names = rng.sample(NAMES, rng.randrange(0, 5))
        found.append({name: rng.choice(VALUES) for name in names})
    return found


@pytest.mark.parametrize("schema", COVERED)
def test_the_fast_check_never_accepts_what_jsonschema_refuses(schema: dict[str, Any]) -> None:
    check = compile_fast_check(schema)
    assert check is not None
    reference = Draft202012Validator(schema, format_checker=Draft202012Validator.FORMAT_CHECKER)
    accepted = 0
    for instance in _instances():
        if check(instance):
            accepted += 1
            assert reference.is_valid(instance), (schema, instance)
    assert accepted > 0


@pytest.mark.parametrize("schema", NOT_COVERED)
def test_other_keywords_leave_the_schema_to_jsonschema(schema: dict[str, Any]) -> None:
    assert compile_fast_check(schema) is None


def test_usual_valid_arguments_take_the_fast_path() -> None:
    check = compile_fast_check(RATES)
    assert check is not None
    assert check({"base": "USD", "quote": "EUR"})
    assert not check({"base": "USD"})
    assert not check({"base": "USD", "quote": "EUR", "x": 1})
    assert not check({"base": "usd", "quote": "EUR"})


def test_an_integral_float_is_left_to_jsonschema_which_accepts_it() -> None:
    schema = {"properties": {"n": {"type": "integer"}}}
    check = compile_fast_check(schema)
    assert check is not None
    assert not check({"n": 2.0})
    assert ArgumentValidator(schema, confirmation=False).validate({"n": 2.0}) == {"n": 2.0}


def test_a_refused_argument_is_still_worded_by_jsonschema() -> None:
    validator = ArgumentValidator(RATES, confirmation=True)
    assert validator.validate({"base": "USD", "quote": "EUR", "_crank_confirmation_token": "ct_a"})
    with pytest.raises(ToolError) as raised:
        validator.validate({"base": "usd", "quote": "EUR", "_crank_confirmation_token": "x"})
    assert raised.value.error_code == "invalid_arguments"
    fields = [problem["field"] for problem in raised.value.details["errors"]]
    assert fields == ["$.base", "$['_crank_confirmation_token']"]
