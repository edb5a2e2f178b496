"""A quick "certainly valid" for the common shape of a tool's input schema.

jsonschema's ``iter_errors`` walks every keyword through its generic
machinery, a noticeable share of a tools/call. Most input schemas are a flat
object of scalar properties, so ``compile_fast_check`` turns exactly that
shape into a plain function; the ``ArgumentValidator`` calls it first and
asks jsonschema only when it says False, so jsonschema stays the one judge
of invalid arguments and words every error.

The check never accepts what jsonschema (Draft 2020-12) would refuse. It
answers True only for:

- a root with ``type: object`` (or none), ``properties``, ``required`` and
  a boolean ``additionalProperties``;
- properties whose keywords are ``type``, ``enum`` (strings), ``minLength``,
  ``maxLength``, ``pattern``, ``minimum``, ``maximum``, ``exclusiveMinimum``,
  ``exclusiveMaximum``, plus annotations.

Any other keyword anywhere (``format``, ``$ref``, ``items``, ``const``,
``$schema``, unknown ones...) means no fast check for that schema; an
instance the check is unsure of (a float for ``integer``, a non-string for
``enum``) gets False. Each keyword applies to the instance types it applies
to in JSON Schema (``pattern`` to strings, ``minimum`` to numbers).
A ``pattern`` is searched with RE2 (``shared.engine.schema_patterns``), as
jsonschema's is in Crank; one RE2 cannot compile means no fast check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from shared.engine.schema_patterns import PatternError, SchemaPattern, compile_pattern, found

__all__ = ["FastCheck", "compile_fast_check"]

FastCheck = Callable[[dict[str, Any]], bool]
_Check = Callable[[Any], bool]

_ANNOTATIONS = frozenset(
    {"title", "description", "default", "examples", "deprecated", "readOnly", "writeOnly"}
    | {"$comment"}
)
_ROOT_KEYWORDS = _ANNOTATIONS | {"type", "properties", "required", "additionalProperties"}
_PROPERTY_KEYWORDS = _ANNOTATIONS | {
    "type",
    "enum",
    "minLength",
    "maxLength",
    "pattern",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
}
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


# True only when the value is certainly of the type; an integral float is left
# to jsonschema (it counts as an integer there).
_TYPES: dict[str, _Check] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": _is_number,
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
}


def _type_check(declared: Any) -> _Check | None:
    names = declared if isinstance(declared, list) else [declared]
    if not names or not all(isinstance(n, str) and n in _TYPES for n in names):
        return None
    if len(names) == 1:
        return _TYPES[names[0]]
    checks = tuple(_TYPES[n] for n in names)
    return lambda v: any(check(v) for check in checks)


def _bound_check(keyword: str, limit: Any) -> _Check | None:
    if not _is_number(limit):
        return None
    if keyword == "minimum":
        return lambda v: not _is_number(v) or v >= limit
    if keyword == "maximum":
        return lambda v: not _is_number(v) or v <= limit
    if keyword == "exclusiveMinimum":
        return lambda v: not _is_number(v) or v > limit
    return lambda v: not _is_number(v) or v < limit


def _length_check(keyword: str, limit: Any) -> _Check | None:
    if not isinstance(limit, int) or isinstance(limit, bool):
        return None
    if keyword == "minLength":
        return lambda v: not isinstance(v, str) or len(v) >= limit
    return lambda v: not isinstance(v, str) or len(v) <= limit


def _property_check(schema: Any) -> _Check | None:
    if not isinstance(schema, Mapping) or not set(schema) <= _PROPERTY_KEYWORDS:
        return None
    checks: list[_Check] = []
    if "type" in schema:
        check = _type_check(schema["type"])
        if check is None:
            return None
        checks.append(check)
    if "enum" in schema:
        values = schema["enum"]
        if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
            return None
        allowed = frozenset(values)
        checks.append(lambda v: isinstance(v, str) and v in allowed)
    for keyword in ("minLength", "maxLength"):
        if keyword in schema:
            length = _length_check(keyword, schema[keyword])
            if length is None:
                return None
            checks.append(length)
    if "pattern" in schema:
        pattern = _regex(schema["pattern"])
        if pattern is None:
            return None
        checks.append(lambda v: not isinstance(v, str) or found(pattern, v))
    for keyword in _BOUNDS:
        if keyword in schema:
            bound = _bound_check(keyword, schema[keyword])
            if bound is None:
                return None
            checks.append(bound)
    return _all_of(checks)


def _regex(pattern: Any) -> Any:
    """The RE2 regex of a ``pattern`` (compiled already when the schema was prepared), or None."""
    if isinstance(pattern, SchemaPattern):
        return pattern.regex
    if not isinstance(pattern, str):
        return None
    try:
        return compile_pattern(pattern)  # searched unanchored, as JSON Schema says
    except PatternError:
        return None


def _all_of(checks: list[_Check]) -> _Check:
    """One function for a property's checks (no generator per call: this is the hot path)."""
    if not checks:
        return lambda _: True
    if len(checks) == 1:
        return checks[0]
    if len(checks) == 2:
        first, second = checks
        return lambda v: first(v) and second(v)
    bound = tuple(checks)

    def every(v: Any) -> bool:
        for check in bound:  # noqa: SIM110 - all() would build a generator per call
            if not check(v):
                return False
        return True

    return every


def compile_fast_check(schema: Mapping[str, Any]) -> FastCheck | None:
    """The quick check of ``schema``, or None when its shape is not covered."""
    if not set(schema) <= _ROOT_KEYWORDS or schema.get("type", "object") != "object":
        return None
    properties = schema.get("properties", {})
    required = schema.get("required", [])
    additional = schema.get("additionalProperties", True)
    if not isinstance(properties, Mapping) or not isinstance(additional, bool):
        return None
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return None
    checks: dict[str, _Check] = {}
    for name, property_schema in properties.items():
        check = _property_check(property_schema)
        if check is None:
            return None
        checks[name] = check
    needed = tuple(required)

    def fast_check(arguments: dict[str, Any]) -> bool:
        for name, value in arguments.items():
            check = checks.get(name)
            if check is None:
                if not additional:
                    return False
            elif not check(value):
                return False
        return all(name in arguments for name in needed)

    return fast_check
