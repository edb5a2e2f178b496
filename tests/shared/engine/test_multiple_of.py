"""``multipleOf`` judged on the decimal values the JSON spells, not on binary floats
(shared.engine.schema_keywords): jsonschema refused ``19.99`` for ``multipleOf: 0.01``,
a price any model sends; the gateway fuzzer found it."""

from __future__ import annotations

from typing import Any

import pytest

from shared.engine.compiler import ArgumentValidator
from shared.engine.errors import ToolError

SCHEMA = {
    "type": "object",
    "properties": {
        "price": {"type": "number", "multipleOf": 0.01},
        "step": {"type": "integer", "multipleOf": 5},
        "half": {"type": "number", "multipleOf": 0.5},
    },
}
VALIDATOR = ArgumentValidator(SCHEMA, confirmation=False)


@pytest.mark.parametrize(
    "arguments",
    [
        {"price": 19.99},
        {"price": 0.07},
        {"price": 0.29},
        {"price": 1e308},
        {"price": 12},
        {"step": 2**200 * 5},
        {"half": 2.5},
        {"half": -7.0},
    ],
)
def test_decimal_multiples_are_accepted(arguments: dict[str, Any]) -> None:
    assert VALIDATOR.validate(arguments).keys() == arguments.keys()  # no invalid_arguments


@pytest.mark.parametrize(
    ("arguments", "field"),
    [({"price": 0.005}, "$.price"), ({"price": 5e-324}, "$.price"), ({"step": 7}, "$.step")],
)
def test_other_values_are_invalid_arguments_naming_the_field(
    arguments: dict[str, Any], field: str
) -> None:
    with pytest.raises(ToolError) as raised:
        VALIDATOR.validate(arguments)
    assert raised.value.error_code == "invalid_arguments"
    assert raised.value.details["errors"] == [{"field": field, "rule": "multipleOf"}]
