from __future__ import annotations

from typing import Any

import msgspec
import pytest

from shared.engine.spec import AgentSpec, OperationSpec
from shared.engine.spec_validation import validate_agent, validate_operation


def frankfurter(**changes: Any) -> dict[str, Any]:
    """The documented example operation, with top-level keys replaced by ``changes``."""
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
        "https://sales.example/orders/{++order_id}",
        "https://sales.example/orders/{+}",
        "https://sales.example/orders/{order_id*}",
        "https://sales.example/v1/../admin/{order_id}",  # a static dot segment
        "https://sales.example/v1/%2e%2e/admin/{order_id}",
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


def test_reserved_expansion_is_accepted() -> None:
    assert fields(with_path("https://sales.example/files/{+order_id}/raw")) == set()


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
    assert "input.properties.a.$ref" in fields(remote)
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


# --- headers -------------------------------------------------------------------------------


def _with_idempotency(header: str) -> dict[str, Any]:
    raw = with_path(
        "https://sales.example/orders/{order_id}",
        "POST",
        execution_config={"idempotency": {"argument": "order_id", "header": header}},
    )
    return raw


@pytest.mark.parametrize("header", ["Host", "content-length", "Transfer-Encoding", "Connection"])
def test_reserved_headers_are_refused_as_auth_and_idempotency_headers(header: str) -> None:
    auth = frankfurter()
    auth["request"]["auth"] = {"type": "header", "name": header, "secret": "KEY"}
    assert "request.auth.name" in fields(auth)
    assert "execution_config.idempotency.header" in fields(_with_idempotency(header))


def test_a_header_configured_in_two_places_is_refused_whatever_its_case() -> None:
    static_and_auth = frankfurter()
    static_and_auth["request"]["headers"] = {"X-Api-Key": "public"}
    static_and_auth["request"]["auth"] = {"type": "header", "name": "x-api-key", "secret": "K"}
    assert "request.auth.name" in fields(static_and_auth)

    static_and_idempotency = _with_idempotency("idempotency-key")
    static_and_idempotency["request"]["headers"] = {"Idempotency-Key": "fixed"}
    assert "execution_config.idempotency.header" in fields(static_and_idempotency)

    bearer_and_idempotency = _with_idempotency("Authorization")
    bearer_and_idempotency["request"]["auth"] = {"type": "bearer", "secret": "K"}
    assert "execution_config.idempotency.header" in fields(bearer_and_idempotency)

    twice_in_static = frankfurter()
    twice_in_static["request"]["headers"] = {"Accept": "application/json", "accept": "text/csv"}
    assert "request.headers.accept" in fields(twice_in_static)


@pytest.mark.parametrize("value", ["a\r\nX-Injected: 1", "a\nb", "a\rb", "a\x00b"])
def test_static_header_values_with_cr_lf_or_nul_are_refused(value: str) -> None:
    raw = frankfurter()
    raw["request"]["headers"] = {"X-Trace": value}
    assert "request.headers.X-Trace" in fields(raw)


@pytest.mark.parametrize("header", ["Authorization", "proxy-authorization", "Cookie"])
def test_credentials_in_static_headers_are_refused(header: str) -> None:
    raw = frankfurter()
    raw["request"]["headers"] = {header: "Bearer sk_live_123"}
    assert f"request.headers.{header}" in fields(raw)


def test_header_auth_may_name_authorization_for_a_custom_scheme() -> None:
    raw = frankfurter()
    raw["request"]["auth"] = {"type": "header", "name": "Authorization", "secret": "TOKEN"}
    assert fields(raw) == set()


# --- names end where the string ends -------------------------------------------------------


def test_names_with_a_trailing_newline_are_refused() -> None:
    assert "name" in fields(frankfurter(name="frankfurter_latest_rate\n"))
    secret = frankfurter()
    secret["request"]["auth"] = {"type": "bearer", "secret": "KEY\n"}
    assert "request.auth.secret" in fields(secret)
    header = frankfurter()
    header["request"]["headers"] = {"Accept\n": "application/json"}
    assert "request.headers.Accept\n" in fields(header)
    assert "execution_config.idempotency.header" in fields(_with_idempotency("Idempotency-Key\n"))
    agent = msgspec.convert({"slug": "rates\n", "operations": ["op\n"]}, AgentSpec)
    assert {e.field for e in validate_agent(agent)} == {"slug", "operations[0]"}


@pytest.mark.parametrize(
    "url",
    [
        "https://sales.example/orders/{order_id\n}",
        "https://sales.example/orders/{order_id}\n",
        "https://sales.example/or\tders/{order_id}",
        "https://sales.example/orders /{order_id}",
    ],
)
def test_urls_with_whitespace_or_control_characters_are_refused(url: str) -> None:
    assert "request.url" in fields(with_path(url))


# --- input of the wrong shape --------------------------------------------------------------


@pytest.mark.parametrize(
    "input_schema",
    [
        {"type": "object", "properties": 5, "required": ["order_id"]},
        {"type": "object", "properties": ["order_id"], "required": ["order_id"]},
        {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": 5},
        {"type": "object", "properties": {"order_id": {"type": "string"}}, "required": "order_id"},
    ],
)
def test_properties_or_required_of_the_wrong_type_are_field_errors(
    input_schema: dict[str, Any],
) -> None:
    raw = with_path(
        "https://sales.example/orders/{order_id}",
        "POST",
        execution_config={"idempotency": {"argument": "order_id"}},
    )
    raw["input"] = input_schema
    found = fields(raw)
    assert found
    assert all(field.startswith("input.") for field in found)


def test_a_schema_nested_too_deeply_is_a_field_error_not_a_crash() -> None:
    deep: dict[str, Any] = {"type": "string"}
    for _ in range(400):
        deep = {"not": deep}
    raw = frankfurter()
    raw["input"]["properties"]["base"] = deep
    assert "input" in fields(raw)


# --- JSON Schema dialect and references ----------------------------------------------------


def test_only_the_2020_12_dialect_is_accepted() -> None:
    for dialect in (
        "https://json-schema.org/draft/2020-12/schema",
        "https://json-schema.org/draft/2020-12/schema#",
    ):
        accepted = frankfurter()
        accepted["input"]["$schema"] = dialect
        assert fields(accepted) == set()
    refused = frankfurter()
    refused["input"]["$schema"] = "http://json-schema.org/draft-07/schema#"
    assert "input.$schema" in fields(refused)
    output = frankfurter(
        response={"output_schema": {"$schema": "https://json-schema.org/draft/2019-09/schema"}}
    )
    assert "response.output_schema.$schema" in fields(output)


@pytest.mark.parametrize("keyword", ["$ref", "$dynamicRef", "$recursiveRef"])
def test_every_kind_of_reference_must_stay_in_the_document(keyword: str) -> None:
    raw = frankfurter()
    raw["input"]["properties"]["base"] = {keyword: "https://evil.example/s.json#x"}
    assert f"input.properties.base.{keyword}" in fields(raw)


def test_a_local_reference_must_resolve_to_a_schema() -> None:
    dangling = frankfurter()
    dangling["input"]["properties"]["base"] = {"$ref": "#/$defs/nope"}
    assert "input.properties.base.$ref" in fields(dangling)
    not_a_schema = frankfurter()
    not_a_schema["input"]["properties"]["base"] = {"$ref": "#/required"}
    assert "input.properties.base.$ref" in fields(not_a_schema)
    unknown_anchor = frankfurter()
    unknown_anchor["input"]["properties"]["base"] = {"$dynamicRef": "#nowhere"}
    assert "input.properties.base.$dynamicRef" in fields(unknown_anchor)
    in_output = frankfurter(response={"output_schema": {"$ref": "#/$defs/gone"}})
    assert "response.output_schema.$ref" in fields(in_output)


def test_local_references_resolve_through_anchors_and_embedded_resources() -> None:
    raw = frankfurter()
    raw["input"]["$defs"] = {
        "code": {"$anchor": "code", "type": "string", "pattern": "^[A-Z]{3}$"},
        "nested": {
            "$id": "https://schemas.example/nested",
            "$defs": {"inner": {"type": "string"}},
            "properties": {"x": {"$ref": "#/$defs/inner"}},  # relative to the embedded $id
        },
    }
    raw["input"]["properties"]["base"] = {"$ref": "#code", "description": "from"}
    raw["input"]["properties"]["quote"] = {"$ref": "#/$defs/code", "description": "to"}
    raw["input"]["properties"]["extra"] = {"$ref": "#/$defs/nested"}
    assert fields(raw) == set()


# --- URLs ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    [
        "https://sales.example:99999/orders/{order_id}",
        "https://sales.example:http/orders/{order_id}",
        "https://[::1/orders/{order_id}",
    ],
)
def test_a_url_that_does_not_parse_is_a_field_error(url: str) -> None:
    assert fields(with_path(url)) == {"request.url"}


@pytest.mark.parametrize(
    "declaration",
    [{"type": "object"}, {"type": "array"}, {"type": "boolean"}, {}, True, {"type": ["string"]}],
)
def test_path_variables_must_be_declared_as_string_integer_or_number(declaration: Any) -> None:
    raw = with_path("https://sales.example/orders/{order_id}")
    raw["input"]["properties"]["order_id"] = declaration
    assert "input.properties.order_id.type" in fields(raw)


@pytest.mark.parametrize("kind", ["string", "integer", "number"])
def test_scalar_path_variables_are_accepted(kind: str) -> None:
    raw = with_path("https://sales.example/orders/{order_id}")
    raw["input"]["properties"]["order_id"] = {"type": kind, "description": "id"}
    assert fields(raw) == set()


def test_an_id_that_is_not_a_uri_is_a_field_error() -> None:
    raw = frankfurter()
    raw["input"]["$id"] = "http://[::1"
    assert "input" in fields(raw)
