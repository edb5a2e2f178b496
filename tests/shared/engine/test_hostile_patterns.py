"""Schema regexes run on RE2 and argument walks are bounded: no input stalls the validator.

``^(a+)+$`` against n ``a`` and a ``!`` takes 2^n steps in a backtracking
engine (Python's ``re``: minutes at n = 30); every test below uses 10,000.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import pytest

from shared.engine.argument_limits import MAX_ARGUMENT_DEPTH, MAX_ARGUMENT_NODES
from shared.engine.compiler import ArgumentValidator
from shared.engine.errors import ToolError
from shared.engine.schema_fast_path import compile_fast_check
from shared.engine.schema_keywords import all_unique, prepare_argument_schema
from shared.engine.schema_patterns import PatternError, compile_pattern
from shared.engine.spec import OperationSpec
from shared.engine.spec_validation import validate_operation

EVIL = "^(a+)+$"
HOSTILE = "a" * 10_000 + "!"
# Generous for a loaded 2-core machine; a backtracking engine needs years, RE2 about 1 ms.
QUICK_S = 0.5


@contextmanager
def quick() -> Iterator[None]:
    started = time.perf_counter()
    yield
    elapsed = time.perf_counter() - started
    assert elapsed < QUICK_S, f"took {elapsed * 1000:.0f} ms"


def schema(**properties: Any) -> dict[str, Any]:
    return {"type": "object", "properties": properties}


def refusal(validate: Callable[[], Any]) -> list[dict[str, str]]:
    with pytest.raises(ToolError) as raised:
        validate()
    assert raised.value.error_code == "invalid_arguments"
    errors: list[dict[str, str]] = raised.value.details["errors"]
    return errors


def operation(input_schema: dict[str, Any]) -> OperationSpec:
    return msgspec.convert(
        {
            "name": "get_code",
            "description": "Gets a code. Use when asked.",
            "input": input_schema,
            "request": {"method": "GET", "url": "https://api.example/codes"},
        },
        OperationSpec,
    )


# --- the pathological pattern ---------------------------------------------------------


def test_the_fast_path_answers_the_pathological_pattern_in_milliseconds() -> None:
    fast = compile_fast_check(
        prepare_argument_schema(schema(x={"type": "string", "pattern": EVIL}))
    )
    assert fast is not None
    with quick():
        assert fast({"x": HOSTILE}) is False
        assert fast({"x": "a" * 10_000}) is True


def test_the_validator_refuses_the_pathological_input_in_milliseconds() -> None:
    validator = ArgumentValidator(schema(x={"type": "string", "pattern": EVIL}), confirmation=False)
    with quick(), pytest.raises(ToolError) as raised:
        validator.validate({"x": HOSTILE})
    assert raised.value.details["errors"] == [{"field": "$.x", "rule": "pattern"}]
    assert raised.value.message == f"Invalid arguments: $.x: '{'a' * 40}'… does not match '{EVIL}'"


def test_the_jsonschema_path_evaluates_the_pattern_with_re2() -> None:
    # items and nesting are beyond the fast path: jsonschema judges, with Crank's keywords
    validator = ArgumentValidator(
        schema(
            tags={"type": "array", "items": {"type": "string", "pattern": EVIL}},
            inner={"type": "object", "properties": {"y": {"$ref": "#/$defs/evil"}}},
        )
        | {"$defs": {"evil": {"type": "string", "pattern": EVIL}}},
        confirmation=False,
    )
    with quick():
        errors = refusal(
            lambda: validator.validate({"tags": ["aaa", HOSTILE], "inner": {"y": HOSTILE}})
        )
    assert errors == [
        {"field": "$.inner.y", "rule": "pattern"},
        {"field": "$.tags[1]", "rule": "pattern"},
    ]
    assert validator.validate({"tags": ["aaa"], "inner": {"y": "a"}}) == {
        "tags": ["aaa"],
        "inner": {"y": "a"},
    }


def test_pattern_properties_match_names_with_re2() -> None:
    validator = ArgumentValidator(
        {
            "type": "object",
            "patternProperties": {EVIL: {"type": "integer"}},
            "additionalProperties": False,
        },
        confirmation=False,
    )
    with quick():
        assert refusal(lambda: validator.validate({HOSTILE: 1})) == [
            {"field": f"$[{HOSTILE!r}]", "rule": "additionalProperties"}
        ]
        assert refusal(lambda: validator.validate({"a" * 10_000: "one"}))[0]["rule"] == "type"
    assert validator.validate({"aaa": 1}) == {"aaa": 1}


def test_property_names_patterns_run_on_re2_too() -> None:
    validator = ArgumentValidator(
        {"type": "object", "propertyNames": {"pattern": EVIL}}, confirmation=False
    )
    with quick():
        assert refusal(lambda: validator.validate({HOSTILE: 1}))[0]["rule"] == "pattern"


# --- format: regex ----------------------------------------------------------------------


def test_format_regex_means_a_pattern_re2_compiles_never_a_python_compile() -> None:
    validator = ArgumentValidator(
        schema(rx={"type": "string", "format": "regex"}), confirmation=False
    )
    assert validator.validate({"rx": EVIL}) == {"rx": EVIL}
    assert validator.validate({"rx": "^\\p{L}+$"}) == {"rx": "^\\p{L}+$"}  # Python re refuses
    for refused in ("(a)\\1", "(?=a)", "x{2000}", "("):
        assert refusal(lambda: validator.validate({"rx": refused})) == [  # noqa: B023
            {"field": "$.rx", "rule": "format"}
        ]
    with quick():
        for long in ("(" * 50_000, "a." * 500_000, "a" * 1_001):
            assert refusal(lambda: validator.validate({"rx": long}))[0]["rule"] == "format"  # noqa: B023
    assert validator.validate({"rx": "a" * 1_000}) == {"rx": "a" * 1_000}


# --- the dialect ------------------------------------------------------------------------


def test_ecma_unicode_escapes_become_re2_escapes_and_other_escapes_stay() -> None:
    cyrillic = compile_pattern("^[\\u0400-\\u04FF]+$")
    assert cyrillic.search("Привет") is not None
    assert cyrillic.search("Hello") is None
    assert compile_pattern("^\\u{1F600}$").search("😀") is not None
    assert compile_pattern("^\\\\u0041$").search("\\u0041") is not None  # an escaped backslash
    assert compile_pattern("^\\d+$").search("١٢٣") is None  # \d is ASCII, as in ECMA-262
    assert compile_pattern("^a$").search("a\n") is None  # $ is the end, as in ECMA-262


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        ("(a)\\1", "invalid escape sequence: \\1"),
        ("(?=a)", "invalid perl operator: (?="),
        ("(?<!a)b", "invalid perl operator: (?<!"),
        ("[\\p{L}]{1000}x", "pattern too large"),
        ("a" * 10_001, "longer than 10000 characters"),
    ],
    ids=["backreference", "lookahead", "lookbehind", "too-large", "too-long"],
)
def test_a_pattern_re2_cannot_compile_gives_re2s_reason(pattern: str, reason: str) -> None:
    with pytest.raises(PatternError, match=re.escape(reason)):
        compile_pattern(pattern)


# --- refused on write, fail closed when stored ------------------------------------------


def test_a_refused_pattern_is_a_field_error_with_the_reason() -> None:
    errors = validate_operation(
        operation(
            schema(
                code={"type": "string", "pattern": "^(a)\\1$"},
                ok={"type": "string", "pattern": "^\\p{Lu}\\x{e9}\\u00e9$"},
            )
            | {"patternProperties": {"^(?!x-)": {}}}
        )
    )
    assert [(e.field, "RE2" in e.message) for e in errors] == [
        ("input.patternProperties.^(?!x-)", True),
        ("input.properties.code.pattern", True),
    ]
    assert "invalid escape sequence: \\1" in errors[1].message


def test_unevaluated_properties_beside_pattern_properties_is_refused_and_fails_closed() -> None:
    both = {
        "type": "object",
        "patternProperties": {"^a": {"type": "integer"}},
        "unevaluatedProperties": False,
    }
    assert [e.field for e in validate_operation(operation(both))] == ["input.unevaluatedProperties"]
    validator = ArgumentValidator(both, confirmation=False)  # stored before the check
    with pytest.raises(ToolError) as raised:
        validator.validate({"a": 1})
    assert "cannot be evaluated" in raised.value.message
    # unevaluatedProperties alone still works as jsonschema says
    alone = ArgumentValidator(
        {"type": "object", "properties": {"a": {}}, "unevaluatedProperties": False},
        confirmation=False,
    )
    assert alone.validate({"a": 1}) == {"a": 1}
    assert refusal(lambda: alone.validate({"b": 1}))[0]["rule"] == "unevaluatedProperties"


def test_a_stored_pattern_re2_refuses_fails_closed_for_that_field_only() -> None:
    validator = ArgumentValidator(
        schema(code={"type": "string", "pattern": "(a)\\1"}, n={"type": "integer"}),
        confirmation=False,
    )
    assert validator.validate({"n": 1}) == {"n": 1}
    with pytest.raises(ToolError) as raised:
        validator.validate({"code": "aa"})
    assert raised.value.details["errors"] == [{"field": "$.code", "rule": "pattern"}]
    assert "cannot be evaluated" in raised.value.message


# --- uniqueItems and huge arrays ---------------------------------------------------------


def test_unique_items_of_ten_thousand_values_is_checked_in_one_pass() -> None:
    # ints, strings and objects do not sort together: jsonschema would compare every pair
    validator = ArgumentValidator(
        schema(rows={"type": "array", "uniqueItems": True}), confirmation=False
    )
    rows: list[Any] = [*range(3_333), *map(str, range(3_333)), *({"id": i} for i in range(1_666))]
    assert 1 + len(rows) + 1_666 == MAX_ARGUMENT_NODES - 1
    with quick():
        assert validator.validate({"rows": rows}) == {"rows": rows}
        errors = refusal(lambda: validator.validate({"rows": [*rows[:-1], {"id": 1.0}]}))
    assert errors == [{"field": "$.rows", "rule": "uniqueItems"}]


def test_equality_for_unique_items_is_json_schemas() -> None:
    assert not all_unique([1, 1.0])
    for distinct in ([1, True], [0, False], [None, False], [[1, 2], [2, 1]], ["1", 1]):
        assert all_unique(distinct), distinct
    assert not all_unique([{"a": 1, "b": [1, 2]}, {"b": [1.0, 2], "a": 1}])
    assert not all_unique([2**70, float(2**70)])


def test_more_values_than_the_limit_are_refused_before_any_keyword_runs() -> None:
    validator = ArgumentValidator(
        schema(ids={"type": "array", "uniqueItems": True, "items": {"pattern": EVIL}}),
        confirmation=False,
    )
    with quick():
        errors = refusal(lambda: validator.validate({"ids": [{"x": 1}] * 100_000}))
    assert errors == [{"field": "$.ids", "rule": "maxNodes"}]
    ten_k = [HOSTILE[:20] + str(i) for i in range(MAX_ARGUMENT_NODES - 1)]
    with quick():
        assert refusal(lambda: validator.validate({"ids": ten_k}))[0]["rule"] == "pattern"


def test_arguments_nested_deeper_than_the_limit_are_refused() -> None:
    validator = ArgumentValidator({"type": "object"}, confirmation=False)
    deep: Any = []
    for _ in range(MAX_ARGUMENT_DEPTH + 5):
        deep = [deep, 1]
    errors = refusal(lambda: validator.validate({"tree": deep}))
    assert errors[0]["rule"] == "maxDepth"
    assert errors[0]["field"].startswith("$.tree[0][0]")
    shallow: Any = 1
    for _ in range(MAX_ARGUMENT_DEPTH - 2):
        shallow = [shallow]
    assert validator.validate({"tree": shallow}) == {"tree": shallow}
