"""The metaschema quick path says yes only where jsonschema's full check says yes."""

from __future__ import annotations

import random
from typing import Any
from urllib.parse import urljoin

import pytest
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from jsonschema_specifications import REGISTRY  # type: ignore[import-untyped]

from shared.engine.metaschema import MAX_DEPTH, METASCHEMA_KEYWORDS, surely_valid
from shared.engine.schema_keywords import SCHEMA_CHECK_FORMAT_CHECKER

# Values each keyword may get, valid and not: a schema drawn from them is valid or not.
_VALUES: dict[str, list[Any]] = {
    "type": ["string", "object", ["string", "null"], [], ["string", "string"], "text", 3],
    "enum": [["a", "b"], [], [1, {"x": 1}], "a"],
    "const": [1, None, {"a": [1]}],
    "required": [["a"], [], ["a", "a"], [1], "a"],
    "minLength": [0, 3, -1, 1.5, True, "3"],
    "maxItems": [10, -2, 2.0],
    "minimum": [0, -1.5, "0", True],
    "exclusiveMaximum": [10, None],
    "multipleOf": [2, 0.5, 0, -1],
    "pattern": ["^[a-z]+$", 5],
    "format": ["date", 5],
    "uniqueItems": [True, "yes"],
    "description": ["the id", None],
    "title": ["Title", ["x"]],
    "default": [None, 5, {"a": 1}],
    "examples": [[1, 2], "x"],
    "deprecated": [False, 0],
    "dependentRequired": [{"a": ["b"]}, {"a": "b"}, {"a": ["b", "b"]}],
    "$comment": ["note", 1],
    "$ref": ["#/$defs/x", 4],
    "$id": ["https://example.com/s", "not a uri ##"],
    "$schema": ["https://json-schema.org/draft/2020-12/schema", 7],
    "$anchor": ["a1", "1 bad"],
    "x-vendor": [{"anything": True}, 3],
    "nullable": [True, "yes"],
}
_SUBSCHEMA = ("items", "not", "additionalProperties", "contains", "if", "then", "else")
_ARRAYS = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAPS = ("properties", "$defs", "patternProperties", "dependentSchemas")


def draw(rng: random.Random, depth: int = 0) -> Any:
    if depth > 3 or rng.random() < 0.1:
        return rng.choice([True, False, {}, {"type": "string"}, 3, None])
    schema: dict[str, Any] = {}
    for keyword in rng.sample(sorted(_VALUES), rng.randint(0, 4)):
        schema[keyword] = rng.choice(_VALUES[keyword])
    for keyword in rng.sample(_SUBSCHEMA, rng.randint(0, 2)):
        schema[keyword] = draw(rng, depth + 1)
    for keyword in rng.sample(_ARRAYS, rng.randint(0, 1)):
        schema[keyword] = [draw(rng, depth + 1) for _ in range(rng.randint(0, 2))]
    for keyword in rng.sample(_MAPS, rng.randint(0, 1)):
        schema[keyword] = (
            {f"p{i}": draw(rng, depth + 1) for i in range(rng.randint(0, 2))}
            if rng.random() < 0.9
            else [draw(rng, depth + 1)]
        )
    return schema


def full_check_passes(schema: Any) -> bool:
    try:
        Draft202012Validator.check_schema(schema, format_checker=SCHEMA_CHECK_FORMAT_CHECKER)
    except SchemaError:
        return False
    return True


def test_every_schema_the_quick_path_accepts_passes_the_full_check() -> None:
    rng = random.Random(8)
    accepted = refused_by_both = 0
    for _ in range(3000):
        schema = draw(rng)
        full = full_check_passes(schema)
        if surely_valid(schema):
            assert full, schema
            accepted += 1
        elif not full:
            refused_by_both += 1
    assert accepted > 300  # the draw reaches the quick path often ...
    assert refused_by_both > 300  # ... and invalid schemas too


@pytest.mark.parametrize(
    "schema",
    [
        {
            "type": "object",
            "properties": {
                "base": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "from"},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100, "default": 10},
                "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
                "mode": {"enum": ["a", "b"]},
                "when": {"type": ["string", "null"], "format": "date"},
            },
            "required": ["base"],
            "additionalProperties": False,
        },
        {"type": "object", "properties": {"x": {"$ref": "#/$defs/x"}}, "$defs": {"x": True}},
        {"type": "object", "x-vendor": {"type": 5}, "nullable": True},
    ],
)
def test_ordinary_tool_schemas_take_the_quick_path(schema: dict[str, Any]) -> None:
    assert surely_valid(schema)
    assert full_check_passes(schema)


def test_core_keywords_and_deep_nesting_go_to_the_full_check() -> None:
    assert not surely_valid({"$id": "https://example.com/s", "type": "object"})
    assert not surely_valid({"$dynamicRef": "#meta"})
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(MAX_DEPTH + 1):
        deep = {"not": deep}
    assert not surely_valid(deep)


def test_the_keyword_list_is_the_metaschemas() -> None:
    meta = Draft202012Validator.META_SCHEMA
    named: set[str] = set(meta["properties"])
    for vocabulary in meta["allOf"]:
        contents = REGISTRY.contents(urljoin(meta["$id"], vocabulary["$ref"]))
        named |= set(contents["properties"])
    assert named == METASCHEMA_KEYWORDS
