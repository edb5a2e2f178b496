from __future__ import annotations

import base64
import json
from typing import Any
from urllib.parse import urlsplit

import pytest

from shared.engine.errors import ToolError
from shared.engine.request_builder import BuiltRequest, RequestBuilder, build_request, render_scalar
from shared.engine.spec import OperationSpec, operation_from_builtins


def operation(
    method: str = "GET",
    url: str = "https://api.example.com/v1/orders/{order_id}",
    properties: dict[str, Any] | None = None,
    **request: Any,
) -> OperationSpec:
    props = properties or {
        "order_id": {"type": "string"},
        "status": {"type": "string"},
        "limit": {"type": "integer"},
    }
    execution = request.pop("execution_config", None)
    spec: dict[str, Any] = {
        "name": "orders",
        "description": "Gets orders.",
        "input": {"type": "object", "properties": props, "required": ["order_id"]},
        "request": {"method": method, "url": url, **request},
    }
    if execution is not None:
        spec["execution_config"] = execution
    return operation_from_builtins(spec)


def header(built: BuiltRequest, name: str) -> str | None:
    values = [v for k, v in built.headers if k.lower() == name.lower()]
    return values[0] if values else None


def test_path_variable_is_expanded_inside_its_segment() -> None:
    built = build_request(operation(), {"order_id": "ord_123"})
    assert built.url == "https://api.example.com/v1/orders/ord_123"
    assert built.method == "GET"
    assert built.body is None


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        ("?x=1", "%3Fx%3D1"),
        ("#frag", "%23frag"),
        ("ключ", "%D0%BA%D0%BB%D1%8E%D1%87"),
        ("a b+c", "a%20b%2Bc"),
        ("@evil.com", "%40evil.com"),
        ("50%", "50%25"),
        ("v1.2..3", "v1.2..3"),
    ],
)
def test_path_values_are_percent_encoded_and_cannot_leave_their_segment(
    value: str, encoded: str
) -> None:
    built = build_request(operation(), {"order_id": value})
    assert built.url == f"https://api.example.com/v1/orders/{encoded}"
    parts = urlsplit(built.url)
    assert parts.hostname == "api.example.com"
    assert parts.path.split("/")[:4] == ["", "v1", "orders", encoded]
    assert parts.query == ""
    assert parts.fragment == ""


@pytest.mark.parametrize("value", ["", ".", ".."])
def test_dot_segments_and_empty_path_values_are_invalid_arguments(value: str) -> None:
    with pytest.raises(ToolError) as caught:
        build_request(operation(), {"order_id": value})
    assert caught.value.error_code == "invalid_arguments"
    assert caught.value.details["errors"] == [{"field": "$.order_id", "rule": "path"}]


def test_missing_or_structured_path_value_is_invalid_arguments() -> None:
    for arguments in ({}, {"order_id": None}, {"order_id": {"a": 1}}, {"order_id": [1]}):
        with pytest.raises(ToolError) as caught:
            build_request(operation(), arguments)
        assert caught.value.error_code == "invalid_arguments"


@pytest.mark.parametrize(
    ("value", "text"),
    [(True, "true"), (False, "false"), (7, "7"), (-1, "-1"), (1.5, "1.5"), ("x", "x")],
)
def test_scalars_render_canonically(value: Any, text: str) -> None:
    assert render_scalar(value) == text
    assert build_request(operation(), {"order_id": value}).url.endswith(f"/orders/{text}")


def test_static_non_ascii_path_text_is_encoded_and_existing_escapes_kept() -> None:
    spec = operation(url="https://api.example.com/v1/заказы%20x/{order_id}")
    built = build_request(spec, {"order_id": "o"})
    assert built.url == "https://api.example.com/v1/%D0%B7%D0%B0%D0%BA%D0%B0%D0%B7%D1%8B%20x/o"


def test_several_path_variables_in_one_segment_each_encoded() -> None:
    spec = operation(
        url="https://api.example.com/{a}-{b}/x",
        properties={"a": {"type": "string"}, "b": {"type": "integer"}},
    )
    assert build_request(spec, {"a": "x?y", "b": 2}).url == "https://api.example.com/x%3Fy-2/x"


def test_get_sends_arguments_not_in_the_path_to_the_query_by_default() -> None:
    built = build_request(operation(), {"limit": 5, "order_id": "o1", "status": "open & paid"})
    assert built.url == "https://api.example.com/v1/orders/o1?status=open%20%26%20paid&limit=5"
    assert built.body is None
    assert built.content_type is None


def test_delete_sends_arguments_not_in_the_path_to_the_query_by_default() -> None:
    built = build_request(operation("DELETE"), {"order_id": "o1", "status": "x"})
    assert built.method == "DELETE"
    assert built.url.endswith("/orders/o1?status=x")
    assert built.body is None


@pytest.mark.parametrize("method", ["POST", "PUT", "PATCH"])
def test_mutating_methods_send_arguments_not_in_the_path_as_a_json_body(method: str) -> None:
    built = build_request(operation(method), {"order_id": "o1", "status": "paid", "limit": 2})
    assert built.url == "https://api.example.com/v1/orders/o1"
    assert built.body is not None
    assert json.loads(built.body) == {"status": "paid", "limit": 2}
    assert built.content_type == "application/json"
    assert header(built, "Content-Type") == "application/json"


def test_default_body_with_nothing_left_is_no_body() -> None:
    built = build_request(operation("POST"), {"order_id": "o1"})
    assert built.body is None
    assert header(built, "Content-Type") is None


def test_default_query_follows_the_declared_order_then_sorted_extras() -> None:
    built = build_request(operation(), {"order_id": "o", "zeta": 1, "alpha": 2, "status": "s"})
    assert urlsplit(built.url).query == "status=s&alpha=2&zeta=1"


def test_explicit_query_maps_names_to_jmespath_and_omits_nulls() -> None:
    spec = operation(query={"state": "status", "n": "limit", "missing": "nothing", "x": "`null`"})
    built = build_request(spec, {"order_id": "o", "status": "open"})
    assert urlsplit(built.url).query == "state=open"


def test_query_lists_become_repeated_parameters_and_objects_compact_json() -> None:
    spec = operation(
        properties={"order_id": {"type": "string"}, "tags": {"type": "array"}, "f": {}},
    )
    built = build_request(spec, {"order_id": "o", "tags": ["a", None, "b c"], "f": {"k": 1}})
    assert urlsplit(built.url).query == "tags=a&tags=b%20c&f=%7B%22k%22%3A1%7D"


def test_static_query_in_the_url_is_kept() -> None:
    spec = operation(url="https://api.example.com/v1/orders/{order_id}?v=2")
    assert build_request(spec, {"order_id": "o", "status": "s"}).url.endswith("?v=2&status=s")
    assert build_request(spec, {"order_id": "o"}).url.endswith("/orders/o?v=2")


def test_explicit_body_is_a_jmespath_over_the_arguments() -> None:
    spec = operation("POST", body="{status: status, meta: {n: limit}}")
    built = build_request(spec, {"order_id": "o", "status": "s", "limit": 3})
    assert built.body is not None
    assert json.loads(built.body) == {"status": "s", "meta": {"n": 3}}


def test_explicit_body_that_selects_null_sends_no_body() -> None:
    spec = operation("POST", body="nothing")
    assert build_request(spec, {"order_id": "o"}).body is None


def test_post_with_explicit_query_leaves_queried_arguments_out_of_the_default_body() -> None:
    spec = operation("POST", query={"state": "status"})
    built = build_request(spec, {"order_id": "o", "status": "s", "limit": 1})
    assert built.url.endswith("/orders/o?state=s")
    assert built.body is not None
    assert json.loads(built.body) == {"limit": 1}


def test_static_headers_are_sent() -> None:
    built = build_request(operation(headers={"Accept": "application/json"}), {"order_id": "o"})
    assert ("Accept", "application/json") in built.headers


IDEMPOTENT = {"idempotency": {"argument": "request_id", "header": "Idempotency-Key"}}
IDEMPOTENT_PROPERTIES = {
    "order_id": {"type": "string"},
    "request_id": {"type": "string"},
    "amount": {"type": "integer"},
}


def test_idempotency_argument_travels_in_its_header_and_not_in_the_body() -> None:
    spec = operation("POST", properties=IDEMPOTENT_PROPERTIES, execution_config=IDEMPOTENT)
    built = build_request(spec, {"order_id": "o", "request_id": "order-001", "amount": 1200})
    assert header(built, "Idempotency-Key") == "order-001"
    assert built.body is not None
    assert json.loads(built.body) == {"amount": 1200}


def test_idempotency_argument_is_not_in_the_default_query_either() -> None:
    spec = operation("GET", properties=IDEMPOTENT_PROPERTIES, execution_config=IDEMPOTENT)
    built = build_request(spec, {"order_id": "o", "request_id": "k1", "amount": 1})
    assert urlsplit(built.url).query == "amount=1"
    assert header(built, "Idempotency-Key") == "k1"


def test_missing_idempotency_argument_is_invalid_arguments() -> None:
    spec = operation("POST", properties=IDEMPOTENT_PROPERTIES, execution_config=IDEMPOTENT)
    with pytest.raises(ToolError) as caught:
        build_request(spec, {"order_id": "o"})
    assert caught.value.error_code == "invalid_arguments"


def test_idempotency_value_with_a_newline_is_refused() -> None:
    spec = operation("POST", properties=IDEMPOTENT_PROPERTIES, execution_config=IDEMPOTENT)
    with pytest.raises(ToolError) as caught:
        build_request(spec, {"order_id": "o", "request_id": "a\r\nX-Evil: 1"})
    assert caught.value.error_code == "invalid_arguments"


def test_confirmation_token_never_goes_upstream() -> None:
    for method in ("GET", "DELETE", "POST"):
        built = build_request(
            operation(method), {"order_id": "o", "_crank_confirmation_token": "ct_abc"}
        )
        assert "ct_abc" not in built.url
        assert built.body is None
        assert all("ct_abc" not in value for _, value in built.headers)


def test_bearer_auth_uses_the_named_secret_and_is_masked_in_the_redacted_view() -> None:
    spec = operation(auth={"type": "bearer", "secret": "API_TOKEN"})
    built = build_request(spec, {"order_id": "o"}, {"API_TOKEN": "s3cr3t-value"})
    assert ("Authorization", "Bearer s3cr3t-value") in built.headers
    redacted = built.redacted()
    assert ["Authorization", "Bearer ****"] in redacted["headers"]
    assert "s3cr3t-value" not in json.dumps(redacted)
    assert "s3cr3t-value" not in repr(built)


def test_header_auth_puts_the_secret_in_the_named_header() -> None:
    spec = operation(auth={"type": "header", "name": "X-Api-Key", "secret": "KEY"})
    built = build_request(spec, {"order_id": "o"}, {"KEY": "k-123"})
    assert ("X-Api-Key", "k-123") in built.headers
    assert ["X-Api-Key", "****"] in built.redacted()["headers"]


def test_basic_auth_encodes_user_and_password_and_masks_the_encoded_form() -> None:
    spec = operation(auth={"type": "basic", "secret": "BASIC"})
    built = build_request(spec, {"order_id": "o"}, {"BASIC": "user:pa:ss"})
    token = base64.b64encode(b"user:pa:ss").decode()
    assert ("Authorization", f"Basic {token}") in built.headers
    assert token not in json.dumps(built.redacted())


def test_basic_auth_secret_without_a_colon_is_a_user_with_an_empty_password() -> None:
    spec = operation(auth={"type": "basic", "secret": "BASIC"})
    built = build_request(spec, {"order_id": "o"}, {"BASIC": "user"})
    assert header(built, "Authorization") == "Basic " + base64.b64encode(b"user:").decode()


@pytest.mark.parametrize("secrets", [{}, {"OTHER": "x"}, {"API_TOKEN": ""}])
def test_missing_secret_is_secret_missing(secrets: dict[str, str]) -> None:
    spec = operation(auth={"type": "bearer", "secret": "API_TOKEN"})
    with pytest.raises(ToolError) as caught:
        build_request(spec, {"order_id": "o"}, secrets)
    assert caught.value.error_code == "secret_missing"
    assert caught.value.details == {"secret": "API_TOKEN"}


def test_secret_with_a_newline_cannot_inject_a_header() -> None:
    spec = operation(auth={"type": "bearer", "secret": "API_TOKEN"})
    with pytest.raises(ToolError) as caught:
        build_request(spec, {"order_id": "o"}, {"API_TOKEN": "x\r\nHost: evil"})
    assert caught.value.error_code == "secret_missing"


def test_secret_echoed_into_the_body_is_masked_in_the_redacted_view() -> None:
    spec = operation("POST", auth={"type": "bearer", "secret": "T"})
    built = build_request(spec, {"order_id": "o", "status": "tok-9"}, {"T": "tok-9"})
    assert built.redacted()["body"] == '{"status":"****"}'


def test_built_request_is_immutable() -> None:
    built = build_request(operation(), {"order_id": "o"})
    with pytest.raises(AttributeError):
        built.url = "https://evil.example"  # type: ignore[misc]


def test_a_compiled_builder_gives_the_same_request_every_time() -> None:
    builder = RequestBuilder(operation())
    first = builder.build({"order_id": "o", "status": "s"})
    assert builder.build({"order_id": "o", "status": "s"}) == first
