from __future__ import annotations

from typing import Any

import msgspec
import pytest

from shared.spec import OperationSpec
from shared.spec_validation import validate_operation


def frankfurter(**changes: Any) -> dict[str, Any]:
    """DESIGN's example operation, with top-level keys replaced by ``changes``."""
    spec: dict[str, Any] = {
        "name": "frankfurter_latest_rate",
        "title": "Latest exchange rate",
        "description": "Gets the latest exchange rate between two currencies. Use when ...",
        "input": {
            "type": "object",
            "properties": {
                "base": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "from"},
                "quote": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "to"},
            },
            "required": ["base", "quote"],
            "additionalProperties": False,
        },
        "request": {
            "method": "GET",
            "url": "https://api.frankfurter.dev/v1/latest",
            "query": {"base": "base", "symbols": "quote"},
            "headers": {"Accept": "application/json"},
        },
        "response": {"select": "{base: base, date: date, rates: rates}", "max_items": 50},
    }
    spec.update(changes)
    return spec


def with_path(url: str, method: str = "GET", **changes: Any) -> dict[str, Any]:
    return frankfurter(
        input={
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "id"}},
            "required": ["order_id"],
        },
        request={"method": method, "url": url},
        **changes,
    )


def fields(raw: dict[str, Any]) -> set[str]:
    return {error.field for error in validate_operation(msgspec.convert(raw, OperationSpec))}


def test_design_example_is_valid() -> None:
    assert fields(frankfurter()) == set()


def test_simple_path_variable_is_valid() -> None:
    assert fields(with_path("https://sales.example/orders/{order_id}/items")) == set()


@pytest.mark.parametrize("name", ["get order", "x" * 65, "", "orders/get", "кириллица"])
def test_names_that_are_not_tool_names_are_refused(name: str) -> None:
    assert "name" in fields(frankfurter(name=name))


@pytest.mark.parametrize(
    "url",
    [
        "https://sales.example/orders/{+order_id}",  # reserved expansion keeps '/'
        "https://sales.example/orders/{order_id*}",
        "https://sales.example/orders{/order_id}",
        "https://sales.example/orders/{order_id}/{..}",
        "https://sales.example/orders/{order_id",
        "https://{order_id}.sales.example/orders",  # templated host
        "https://sales.example/orders/{order_id}?x={order_id}",
        "ftp://sales.example/orders/{order_id}",
        "https://user:pw@sales.example/orders/{order_id}",
        "https://sales.example/orders/{other}",  # undeclared
    ],
)
def test_urls_that_could_escape_or_template_more_than_a_segment_are_refused(url: str) -> None:
    assert fields(with_path(url)) & {"request.url", "input.required"}


def test_path_variable_must_be_required() -> None:
    raw = with_path("https://sales.example/orders/{order_id}")
    raw["input"]["required"] = []
    assert "input.required" in fields(raw)


def test_input_root_must_be_object() -> None:
    assert "input.type" in fields(frankfurter(input={"type": "array"}))


def test_remote_ref_is_refused_local_ref_allowed() -> None:
    remote = frankfurter(
        input={"type": "object", "properties": {"a": {"$ref": "https://evil.example/s.json"}}}
    )
    local = frankfurter(
        input={
            "type": "object",
            "$defs": {"code": {"type": "string"}},
            "properties": {"a": {"$ref": "#/$defs/code"}},
        }
    )
    assert "input.properties.a" in fields(remote)
    assert fields(local) == set()


def test_invalid_json_schema_is_refused() -> None:
    assert any(f.startswith("input") for f in fields(frankfurter(input={"type": "objekt"})))


def test_jmespath_that_does_not_compile_is_refused() -> None:
    raw = frankfurter(response={"select": "{base: "})
    raw["request"]["query"] = {"base": "base[", "symbols": "quote"}
    assert {"response.select", "request.query.base"} <= fields(raw)


def test_delete_confirmation_cannot_be_switched_off() -> None:
    raw = with_path(
        "https://sales.example/orders/{order_id}", "DELETE", safety={"confirmation": False}
    )
    assert "safety.confirmation" in fields(raw)
    assert fields(with_path("https://sales.example/orders/{order_id}", "DELETE")) == set()


def test_idempotency_argument_must_be_a_required_input() -> None:
    raw = with_path(
        "https://sales.example/orders/{order_id}",
        "POST",
        execution_config={"idempotency": {"argument": "request_id"}},
    )
    assert "execution_config.idempotency.argument" in fields(raw)


def test_get_with_body_mapping_is_refused() -> None:
    raw = frankfurter()
    raw["request"]["body"] = "{base: base}"
    assert "request.body" in fields(raw)


def test_host_header_is_reserved() -> None:
    raw = frankfurter()
    raw["request"]["headers"] = {"Host": "other.example"}
    assert "request.headers.Host" in fields(raw)


def test_header_auth_needs_a_header_name() -> None:
    raw = frankfurter()
    raw["request"]["auth"] = {"type": "header", "secret": "FRANKFURTER_KEY"}
    assert "request.auth.name" in fields(raw)


def test_confirmation_token_argument_is_reserved() -> None:
    raw = frankfurter()
    raw["input"]["properties"]["_crank_confirmation_token"] = {"type": "string"}
    assert "input.properties" in fields(raw)


def test_unknown_field_is_a_decode_error() -> None:
    raw = frankfurter()
    raw["request"]["retry"] = 3
    with pytest.raises(msgspec.ValidationError, match=r"unknown field `retry`"):
        msgspec.convert(raw, OperationSpec)
