"""JSON Schema 2020-12 as Crank evaluates arguments: every keyword in bounded time.

jsonschema's own ``pattern``, ``patternProperties`` and ``additionalProperties``
(which reads the patterns too) run Python's backtracking ``re``, its
``format: regex`` compiles the caller's value with ``re``, and its
``uniqueItems`` falls back to comparing every pair (O(n²)) as soon as an item
is an object, and its ``multipleOf`` divides binary floats (``19.99`` is no
multiple of ``0.01`` there). ``ArgumentSchemaValidator`` is Draft 2020-12 with
those keywords replaced: regexes through ``shared.engine.schema_patterns``
(RE2), uniqueness by hashing each item's canonical form, ``multipleOf`` on the
exact decimal values (docs/architecture.md, "Schema patterns").

``unevaluatedProperties`` reads ``patternProperties`` deep inside jsonschema,
with ``re``; a schema with both is refused on write, and one stored before
that fails closed here (``prepare_argument_schema``).
"""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, validators
from jsonschema.exceptions import ValidationError

from shared.engine.schema_patterns import (
    PatternError,
    compile_pattern,
    prepare_schema,
    search,
    subschemas,
)

__all__ = [
    "ARGUMENT_FORMAT_CHECKER",
    "SCHEMA_CHECK_FORMAT_CHECKER",
    "UNEVALUATED_WITH_PATTERNS",
    "ArgumentSchemaValidator",
    "additional_names",
    "all_unique",
    "prepare_argument_schema",
]

_HEAD = 40  # characters of a failing value quoted in an error
# Replaces unevaluatedProperties where patternProperties is also used: its value says why.
_UNSUPPORTED = "$crankUnsupported"
UNEVALUATED_WITH_PATTERNS = (
    "unevaluatedProperties cannot be evaluated next to patternProperties "
    "(it would run the patterns outside RE2); use additionalProperties"
)


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        matched = search(pattern, instance)
    except PatternError as exc:
        yield ValidationError(f"the schema's pattern {pattern!r} cannot be evaluated: {exc}")
        return
    if not matched:
        yield ValidationError(f"{_head(instance)} does not match {pattern!r}")


def _head(text: str) -> str:
    """The value as jsonschema words it, cut: a megabyte string is not repeated per error."""
    return repr(text) if len(text) <= _HEAD else repr(text[:_HEAD]) + "…"


def _matches(pattern: str, name: str) -> bool:
    try:
        return search(pattern, name)
    except PatternError:
        return False  # a pattern RE2 refuses matches nothing


def _pattern_properties(
    validator: Any, by_pattern: dict[str, Any], instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in by_pattern.items():
        for name, value in instance.items():
            if _matches(pattern, name):
                yield from validator.descend(value, subschema, path=name, schema_path=pattern)


def additional_names(instance: dict[str, Any], schema: Any) -> list[str]:
    """The names of ``instance`` that neither ``properties`` nor ``patternProperties`` cover."""
    declared = schema.get("properties", {}) if isinstance(schema, dict) else {}
    patterns = schema.get("patternProperties", {}) if isinstance(schema, dict) else {}
    return [
        name
        for name in instance
        if name not in declared and not any(_matches(p, name) for p in patterns)
    ]


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    extras = additional_names(instance, schema)
    if validator.is_type(additional, "object"):
        for name in extras:
            yield from validator.descend(instance[name], additional, path=name)
    elif additional is False and extras:
        names = ", ".join(repr(name) for name in sorted(extras))
        verb = "was" if len(extras) == 1 else "were"
        yield ValidationError(f"Additional properties are not allowed ({names} {verb} unexpected)")


def _canonical(value: Any) -> Any:
    """A hashable form equal exactly when JSON Schema calls two values equal:
    1 and 1.0 are equal, true and 1 are not, object key order does not matter."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, dict):
        return ("object", frozenset((k, _canonical(v)) for k, v in value.items()))
    if isinstance(value, list):
        return ("array", tuple(_canonical(v) for v in value))
    return value  # str, int, float, None: Python's equality is JSON Schema's


def all_unique(items: list[Any]) -> bool:
    """Whether no two items are equal, in one pass (hashing, not pairwise comparison)."""
    seen: set[Any] = set()
    for item in items:
        key = _canonical(item)
        if key in seen:
            return False
        seen.add(key)
    return True


def _unique_items(
    validator: Any, unique: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if unique and validator.is_type(instance, "array") and not all_unique(instance):
        yield ValidationError("has non-unique elements")


def _exact(number: int | float) -> Fraction:
    """The decimal a JSON number spells: a float by its shortest repr, exactly."""
    return Fraction(repr(number)) if isinstance(number, float) else Fraction(number)


def _multiple_of(
    validator: Any, multiple: Any, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "number") or not validator.is_type(multiple, "number"):
        return
    if _exact(instance) % _exact(multiple):
        yield ValidationError(f"{instance!r} is not a multiple of {multiple!r}")


def _unsupported(
    validator: Any, reason: str, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    yield ValidationError(f"the schema cannot be evaluated: {reason}")


ArgumentSchemaValidator: Any = validators.extend(  # type: ignore[no-untyped-call]
    Draft202012Validator,
    {
        "pattern": _pattern,
        "patternProperties": _pattern_properties,
        "additionalProperties": _additional_properties,
        "uniqueItems": _unique_items,
        "multipleOf": _multiple_of,
        _UNSUPPORTED: _unsupported,
    },
)


def _is_regex(instance: object) -> bool:
    if isinstance(instance, str):
        compile_pattern(instance, argument=True)  # raises PatternError with RE2's reason
    return True


def _format_checker(*, regex: bool) -> FormatChecker:
    checker = FormatChecker(formats=())
    checker.checkers.update(Draft202012Validator.FORMAT_CHECKER.checkers)
    del checker.checkers["regex"]
    if regex:
        checker.checks("regex", raises=PatternError)(_is_regex)
    return checker


# Arguments: ``format: regex`` means "a pattern RE2 compiles", never compiled with ``re``.
ARGUMENT_FORMAT_CHECKER = _format_checker(regex=True)
# Checking a schema against the metaschema: its patterns are judged with reasons by
# ``spec_validation.schema_pattern_errors``, so the metaschema's ``format: regex`` is off.
SCHEMA_CHECK_FORMAT_CHECKER = _format_checker(regex=False)


def prepare_argument_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` ready for ``ArgumentSchemaValidator``: regexes compiled once (RE2), and
    ``unevaluatedProperties`` next to ``patternProperties`` replaced by a keyword that fails."""
    prepared = prepare_schema(schema)
    nodes = list(subschemas(prepared))
    if any("patternProperties" in node for node in nodes):
        for node in nodes:
            if "unevaluatedProperties" in node:
                del node["unevaluatedProperties"]
                node[_UNSUPPORTED] = UNEVALUATED_WITH_PATTERNS
    return prepared
