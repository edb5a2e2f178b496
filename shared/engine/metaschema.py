"""A quick yes to "is this a valid JSON Schema 2020-12?", before jsonschema's full check.

``Draft202012Validator.check_schema`` walks the metaschema through its
``$dynamicRef`` chain for every node: about a millisecond and a half for a
two-property input schema, which made validation the largest cost of a
10,000-operation ``crank apply`` (docs/architecture.md, "Apply in batches").
``surely_valid`` walks the schema once and answers True only when every
keyword the 2020-12 metaschema constrains has a value the metaschema accepts,
for the keywords that ordinary tool schemas use. Anything else — a core
keyword such as ``$id`` or ``$dynamicRef``, a value of an unexpected type —
answers False, and the caller runs the full check, whose verdict and error
messages are then the only ones. So the quick path can only skip a check that
would have passed; it never decides that a schema is invalid.

The metaschema's ``format`` checks of schema keywords (``uri-reference``,
``regex``) are off in Crank's check (``SCHEMA_CHECK_FORMAT_CHECKER``), so
strings there are only type-checked, as jsonschema does with that checker.
Keywords the metaschema does not name are allowed with any value, as the
metaschema allows them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

# Deeper schemas go to the full check, which judges nesting (a RecursionError there
# is "nested too deeply", as the gateway's validator would fail on it).
MAX_DEPTH: Final = 32
_TYPES: Final = frozenset({"array", "boolean", "integer", "null", "number", "object", "string"})

# Every keyword the 2020-12 metaschema and its vocabularies name; a keyword of this
# set that the table below does not check sends the schema to the full check.
METASCHEMA_KEYWORDS: Final = frozenset(
    {
        "$anchor", "$comment", "$defs", "$dynamicAnchor", "$dynamicRef", "$id", "$ref",
        "$schema", "$vocabulary", "$recursiveAnchor", "$recursiveRef", "definitions",
        "dependencies", "contentEncoding", "contentMediaType", "contentSchema", "format",
        "default", "deprecated", "description", "examples", "readOnly", "title", "writeOnly",
        "const", "dependentRequired", "enum", "exclusiveMaximum", "exclusiveMinimum",
        "maxContains", "maxItems", "maxLength", "maxProperties", "maximum", "minContains",
        "minItems", "minLength", "minProperties", "minimum", "multipleOf", "pattern",
        "required", "type", "uniqueItems", "additionalProperties", "allOf", "anyOf",
        "contains", "dependentSchemas", "else", "if", "items", "not", "oneOf",
        "patternProperties", "prefixItems", "properties", "propertyNames", "then",
        "unevaluatedItems", "unevaluatedProperties",
    }
)  # fmt: skip


def _string(value: Any) -> bool:
    return isinstance(value, str)


def _boolean(value: Any) -> bool:
    return isinstance(value, bool)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _count(value: Any) -> bool:
    """The metaschema's nonNegativeInteger (an int here; 2.0 goes to the full check)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _array(value: Any) -> bool:
    return isinstance(value, list)


def _anything(value: Any) -> bool:
    return True


def _unique_strings(value: Any) -> bool:
    return (
        isinstance(value, list)
        and all(isinstance(item, str) for item in value)
        and len(set(value)) == len(value)
    )


def _type(value: Any) -> bool:
    if isinstance(value, str):
        return value in _TYPES
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(item, str) and item in _TYPES for item in value)
        and len(set(value)) == len(value)
    )


def _multiple_of(value: Any) -> bool:
    return _number(value) and value > 0


def _dependent_required(value: Any) -> bool:
    return isinstance(value, dict) and all(_unique_strings(item) for item in value.values())


_VALUES: Final[dict[str, Callable[[Any], bool]]] = {
    "$comment": _string,
    "$ref": _string,  # format uri-reference: not checked (SCHEMA_CHECK_FORMAT_CHECKER)
    "contentEncoding": _string,
    "contentMediaType": _string,
    "format": _string,
    "default": _anything,
    "deprecated": _boolean,
    "description": _string,
    "examples": _array,
    "readOnly": _boolean,
    "title": _string,
    "writeOnly": _boolean,
    "const": _anything,
    "dependentRequired": _dependent_required,
    "enum": _array,
    "exclusiveMaximum": _number,
    "exclusiveMinimum": _number,
    "maxContains": _count,
    "maxItems": _count,
    "maxLength": _count,
    "maxProperties": _count,
    "maximum": _number,
    "minContains": _count,
    "minItems": _count,
    "minLength": _count,
    "minProperties": _count,
    "minimum": _number,
    "multipleOf": _multiple_of,
    "pattern": _string,  # format regex: judged by schema_pattern_errors, not here
    "required": _unique_strings,
    "type": _type,
    "uniqueItems": _boolean,
}
_SCHEMA: Final = frozenset(
    {
        "additionalProperties", "contains", "contentSchema", "else", "if", "items", "not",
        "propertyNames", "then", "unevaluatedItems", "unevaluatedProperties",
    }
)  # fmt: skip
_SCHEMA_ARRAY: Final = frozenset({"allOf", "anyOf", "oneOf", "prefixItems"})  # non-empty
_SCHEMA_MAP: Final = frozenset({"$defs", "properties", "patternProperties", "dependentSchemas"})


def surely_valid(schema: Any) -> bool:
    """True only if ``schema`` is valid against the 2020-12 metaschema; False: ask jsonschema."""
    stack = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        if isinstance(node, bool):
            continue
        if not isinstance(node, dict) or depth > MAX_DEPTH:
            return False
        below = depth + 1
        for keyword, value in node.items():
            if keyword not in METASCHEMA_KEYWORDS:
                continue  # the metaschema allows other keywords, with any value
            check = _VALUES.get(keyword)
            if check is not None:
                if not check(value):
                    return False
            elif keyword in _SCHEMA:
                stack.append((value, below))
            elif keyword in _SCHEMA_MAP:
                if not isinstance(value, dict):
                    return False
                stack.extend((child, below) for child in value.values())
            elif keyword in _SCHEMA_ARRAY:
                if not isinstance(value, list) or not value:
                    return False
                stack.extend((child, below) for child in value)
            else:
                return False  # a core keyword ($id, $schema, $dynamicRef...): the full check
    return True
