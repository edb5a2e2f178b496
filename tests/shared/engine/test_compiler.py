from __future__ import annotations

import json
from typing import Any

import pytest

from shared.engine.compiler import (
    MAX_REPORTED_ERRORS,
    CompiledOperation,
    compile_operation,
    confirmation_token,
)
from shared.engine.errors import ToolError
from shared.engine.spec import OperationSpec, operation_from_builtins
from shared.engine.spec_validation import validate_operation

# The example operation of docs/operation-file.md, as written there.
FRANKFURTER: dict[str, Any] = {
    "name": "frankfurter_latest_rate",
    "title": "Latest exchange rate",
    "description": (
        "Gets the latest exchange rate between two currencies. Use when the user asks what "
        "one currency is worth in another today. Returns base, date and rates."
    ),
    "input": {
        "type": "object",
        "properties": {
            "base": {
                "type": "string",
                "pattern": "^[A-Z]{3}$",
                "description": "ISO 4217 code to convert from",
            },
            "quote": {
                "type": "string",
                "pattern": "^[A-Z]{3}$",
                "description": "ISO 4217 code to convert to",
            },
        },
        "required": ["base", "quote"],
        "additionalProperties": False,
    },
    "request": {
        "method": "GET",
        "url": "https://api.frankfurter.dev/v1/latest",
        "query": {"base": "base", "symbols": "quote"},
        "headers": {"Accept": "application/json"},
        "body": None,
        "auth": None,
    },
    "response": {
        "select": "{base: base, date: date, rates: rates}",
        "max_items": 50,
        "max_bytes": 65536,
        "output_schema": None,
    },
    "execution_config": {"timeout_ms": 10000, "retries": 2, "idempotency": None},
    "safety": {"approval": False, "confirmation": "auto"},
}


def frankfurter() -> CompiledOperation:
    spec = operation_from_builtins(FRANKFURTER)
    assert validate_operation(spec) == []
    return compile_operation(spec)


def spec_with(input_schema: dict[str, Any], method: str = "GET", **safety: Any) -> OperationSpec:
    return operation_from_builtins(
        {
            "name": "op",
            "description": "Does a thing.",
            "input": input_schema,
            "request": {"method": method, "url": "https://api.example.com/items"},
            "safety": safety or {"confirmation": "auto"},
        }
    )


def invalid(compiled: CompiledOperation, arguments: Any) -> ToolError:
    with pytest.raises(ToolError) as caught:
        compiled.validate(arguments)
    assert caught.value.error_code == "invalid_arguments"
    return caught.value


def test_design_example_builds_exactly_the_demo_request() -> None:
    compiled = frankfurter()
    arguments = compiled.validate({"base": "USD", "quote": "EUR"})
    built = compiled.build(arguments, {})
    assert built.method == "GET"
    assert built.url == "https://api.frankfurter.dev/v1/latest?base=USD&symbols=EUR"
    assert built.body is None
    assert built.headers == (("Accept", "application/json"),)


def test_design_example_selects_base_date_and_rates() -> None:
    upstream = b'{"amount":1.0,"base":"USD","date":"2026-11-27","rates":{"EUR":0.86}}'
    selected = frankfurter().select(200, {"Content-Type": "application/json"}, upstream)
    assert selected.value == {"base": "USD", "date": "2026-11-27", "rates": {"EUR": 0.86}}
    assert not selected.truncated


def test_validation_failure_names_the_field_and_the_rule() -> None:
    error = invalid(frankfurter(), {"base": "usd", "quote": "EUR"})
    assert error.details["errors"] == [{"field": "$.base", "rule": "pattern"}]
    assert "$.base" in error.message


def test_missing_and_unexpected_arguments_are_named_as_fields() -> None:
    error = invalid(frankfurter(), {"base": "USD", "amount": 5})
    assert error.details["errors"] == [
        {"field": "$.amount", "rule": "additionalProperties"},
        {"field": "$.quote", "rule": "required"},
    ]


def test_at_most_five_problems_are_reported_and_the_message_stays_short() -> None:
    compiled = compile_operation(
        spec_with(
            {
                "type": "object",
                "properties": {f"p{i}": {"type": "integer"} for i in range(10)},
            }
        )
    )
    error = invalid(compiled, {f"p{i}": "x" * 500 for i in range(10)})
    assert len(error.details["errors"]) == MAX_REPORTED_ERRORS
    assert len(error.message) < 1200


def test_arguments_that_are_not_an_object_are_invalid() -> None:
    error = invalid(frankfurter(), ["USD", "EUR"])
    assert error.details["errors"] == [{"field": "$", "rule": "type"}]


def test_absent_arguments_count_as_an_empty_object() -> None:
    compiled = compile_operation(spec_with({"type": "object", "properties": {}}))
    assert compiled.validate(None) == {}


def test_formats_are_checked() -> None:
    compiled = compile_operation(
        spec_with({"type": "object", "properties": {"d": {"type": "string", "format": "date"}}})
    )
    assert compiled.validate({"d": "2026-11-30"}) == {"d": "2026-11-30"}
    error = invalid(compiled, {"d": "30.11.2026"})
    assert error.details["errors"] == [{"field": "$.d", "rule": "format"}]


def test_local_refs_resolve_and_a_remote_ref_is_an_internal_error_never_a_fetch() -> None:
    local = spec_with(
        {
            "type": "object",
            "$defs": {"code": {"type": "string", "pattern": "^[A-Z]{3}$"}},
            "properties": {"c": {"$ref": "#/$defs/code"}},
        }
    )
    compiled = compile_operation(local)
    assert compiled.validate({"c": "USD"}) == {"c": "USD"}
    invalid(compiled, {"c": "usd"})
    remote = compile_operation(
        spec_with(
            {
                "type": "object",
                "properties": {"c": {"$ref": "https://example.com/schema.json"}},
            }
        )
    )
    with pytest.raises(ToolError) as caught:
        remote.validate({"c": "x"})
    assert caught.value.error_code == "internal_error"
    assert "example.com" in caught.value.details["schema"]


def test_confirmation_token_is_allowed_for_delete_and_stripped() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"id": {"type": "string"}},
        "required": ["id"],
        "additionalProperties": False,
    }
    compiled = compile_operation(spec_with(schema, "DELETE"))
    assert compiled.confirmation_required
    arguments = {"id": "a", "_crank_confirmation_token": "ct_abc"}
    assert confirmation_token(arguments) == "ct_abc"
    assert compiled.validate(arguments) == {"id": "a"}
    invalid(compiled, {"id": "a", "_crank_confirmation_token": "not a token"})


def test_confirmation_token_is_an_unknown_argument_without_confirmation() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "properties": {"id": {"type": "string"}},
        "additionalProperties": False,
    }
    compiled = compile_operation(spec_with(schema, "GET"))
    assert not compiled.confirmation_required
    error = invalid(compiled, {"id": "a", "_crank_confirmation_token": "ct_abc"})
    assert error.details["errors"][0]["rule"] == "additionalProperties"


def test_confirmation_can_be_required_outside_delete() -> None:
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    compiled = compile_operation(spec_with(schema, "POST", confirmation=True))
    assert compiled.validate({"_crank_confirmation_token": "ct_1"}) == {}


def test_validate_does_not_change_the_callers_arguments() -> None:
    compiled = compile_operation(spec_with({"type": "object"}, "DELETE"))
    arguments = {"_crank_confirmation_token": "ct_1", "x": 1}
    compiled.validate(arguments)
    assert arguments == {"_crank_confirmation_token": "ct_1", "x": 1}


def test_compiled_operation_runs_validate_build_select_in_russian() -> None:
    spec = operation_from_builtins({**FRANKFURTER, "name": "ru"})
    compiled = compile_operation(spec, language="ru")
    with pytest.raises(ToolError) as caught:
        compiled.validate({})
    assert caught.value.message.startswith("Неверные аргументы")
    with pytest.raises(ToolError) as upstream:
        compiled.select(503, {"Retry-After": "3"}, b"down")
    assert upstream.value.error_code == "upstream_unavailable"
    assert upstream.value.retry_after_s == 3
    assert json.dumps(upstream.value.to_structured(), ensure_ascii=False).count("down") == 0
