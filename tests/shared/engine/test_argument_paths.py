"""An argument's path is written one way in every error: child_path (missing and
unexpected keys, limits, NULs) as jsonschema's json_path (every other error)."""

from __future__ import annotations

from typing import Any

import pytest

from shared.engine.argument_limits import child_path
from shared.engine.compiler import ArgumentValidator
from shared.engine.errors import ToolError

KEYS = ["a", "_x", "a b", "X.Trace", "x-y", "$ref", "it's", 'say "hi"', "a\\b", "ключ", "a1"]


def fields(validator: ArgumentValidator, arguments: dict[str, Any]) -> list[str]:
    with pytest.raises(ToolError) as raised:
        validator.validate(arguments)
    return [problem["field"] for problem in raised.value.details["errors"]]


@pytest.mark.parametrize("key", KEYS)
def test_a_missing_key_is_named_as_jsonschema_names_a_wrong_one(key: str) -> None:
    inner = {"type": "object", "properties": {key: {"type": "integer"}}, "required": [key]}
    schema = {"type": "object", "properties": {"outer": inner}}
    validator = ArgumentValidator(schema, confirmation=False)
    [missing] = fields(validator, {"outer": {}})
    [wrong] = fields(validator, {"outer": {key: "x"}})
    assert missing == wrong == child_path("$.outer", key)


def test_paths_read_like_jsonschemas_and_start_bare_under_an_empty_root() -> None:
    assert child_path("$", "a") == "$.a"
    assert child_path("$", "a b") == "$['a b']"
    assert child_path("$", "it's") == "$['it\\'s']"
    assert child_path("$.a", 3) == "$.a[3]"
    assert child_path("$", "a\x00") == "$['a\\x00']"  # never a NUL in a message
    assert child_path("", "title") == "title"
    assert child_path("", 0) == "[0]"
    assert child_path("headers", "X-Trace") == "headers['X-Trace']"
