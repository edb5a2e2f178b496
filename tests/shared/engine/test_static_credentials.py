"""Credentials in clear are refused at write time, by the one detector the linter
shares (shared.engine.credentials), and every auth shape is checked field by field."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from shared.engine.credentials import credential_name, credential_value, static_credentials
from shared.engine.spec import OperationSpec, operation_from_builtins
from shared.engine.spec_validation import FieldError, validate_operation


def operation(**request: Any) -> OperationSpec:
    return operation_from_builtins(
        {
            "name": "list_orders",
            "description": "Lists orders.",
            "input": {"type": "object", "properties": {"status": {"type": "string"}}},
            "request": {"method": "GET", "url": "https://api.example.com/v1/orders", **request},
        }
    )


def errors(**request: Any) -> dict[str, str]:
    return {error.field: error.message for error in validate_operation(operation(**request))}


@pytest.mark.parametrize(
    "name",
    [
        "Authorization",
        "Proxy-Authorization",
        "Cookie",
        "X-Api-Key",
        "Api-Key",
        "apiKey",
        "X-Auth-Token",
        "access_token",
        "client_secret",
        "password",
        "key",
        "Ocp-Apim-Subscription-Key",
        "X-Amz-Security-Token",
    ],
)
def test_names_whose_last_word_is_a_credential_are_credentials(name: str) -> None:
    assert credential_name(name)


@pytest.mark.parametrize(
    "name", ["Accept", "X-Request-Id", "token_type", "X-Auth-Method", "author", "sort_key"]
)
def test_other_names_are_not(name: str) -> None:
    assert not credential_name(name)


@pytest.mark.parametrize(
    "value",
    [
        "Bearer abc",
        "basic dXNlcjpwYXNz",
        "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
        "ghp_" + "a1B2" * 9,
        "xoxb-" + "1234-5678-abcdEFGH",
        "AKIA" + "IOSFODNN7EXAMPLE",
        "AIza" + "SyA-1234567890abcdefghijklmnopqrstu",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.sig",
        "a3425cc136dc0b5de8a9aa5e477c3d68",  # 128 bits in hex
        "wFnOuv8qEJvYb1KVbIghW61hzzxS5qKdmwe7aFa8UTM",  # 256 bits, base64url
        "k3j9x2m1p8q7w4n5r6t0y2u8",  # letters and digits at random
        "-----BEGIN RSA PRIVATE KEY-----",
    ],
)
def test_values_that_look_like_credentials(value: str) -> None:
    assert credential_value(value) is not None


@pytest.mark.parametrize(
    "value",
    [
        "application/json",
        "application/vnd.github.v3+json",
        "2022-06-28",
        "123e4567-e89b-12d3-a456-426614174000",
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36",
        "crank-gateway/1.0.0-beta.12345",
        "en-US,en;q=0.9",
        "no-cache",
        "x-custom-header-value-2024-01",
        "crank_gateway_v2_production_build_42",
    ],
)
def test_ordinary_header_values_are_not_credentials(value: str) -> None:
    assert credential_value(value) is None


@pytest.mark.parametrize("header", ["X-Api-Key", "Authorization", "X-Auth-Token", "Cookie"])
def test_a_credential_header_is_refused_with_a_pointer_to_secrets(header: str) -> None:
    found = errors(headers={"Accept": "application/json", header: "public"})
    assert set(found) == {f"request.headers.{header}"}
    message = found[f"request.headers.{header}"]
    assert "workspace secret" in message
    assert "request.auth" in message
    assert "public" not in message  # the value itself is never repeated


def test_a_credential_value_in_an_innocent_header_is_refused() -> None:
    found = errors(headers={"X-Partner": "sk_live_4eC39HqLyjWDarjtT1zdp7dc"})
    assert "Stripe" in found["request.headers.X-Partner"]


def test_literal_query_values_are_judged_and_argument_expressions_are_not() -> None:
    found = errors(query={"api_key": "'abc'", "token": "token", "v": '`"ghp_' + "x1" * 18 + '"`'})
    assert set(found) == {"request.query.api_key", "request.query.v"}
    assert "type: query, name: api_key" in found["request.query.api_key"]


def test_a_credential_in_the_urls_own_query_is_refused() -> None:
    spec = operation(url="https://api.example.com/v1/orders?key=abc123")
    assert [e.field for e in validate_operation(spec)] == ["request.url"]


def test_the_detector_reports_one_finding_per_field() -> None:
    spec = operation(headers={"X-Api-Key": "Bearer sk_live_4eC39HqLyjWDarjtT1zdp7dc"})
    assert [found.field for found in static_credentials(spec)] == ["request.headers.X-Api-Key"]


GOOD_AUTH = [
    {"type": "bearer", "secret": "T"},
    {"type": "header", "name": "X-Api-Key", "secret": "K"},
    {"type": "query", "name": "api_key", "secret": "K"},
    {"type": "basic", "secret": "B"},
    {"type": "basic", "username": "svc", "password": {"secret": "P"}},
    {"type": "basic", "username": {"secret": "U"}, "password": {"secret": "P"}},
    {"type": "basic", "username": {"secret": "K"}},
]


@pytest.mark.parametrize("auth", GOOD_AUTH)
def test_every_auth_shape_is_accepted(auth: dict[str, Any]) -> None:
    assert errors(auth=auth) == {}


@pytest.mark.parametrize(
    ("auth", "field"),
    [
        ({"type": "bearer"}, "request.auth.secret"),
        ({"type": "bearer", "secret": "T", "name": "X"}, "request.auth.name"),
        ({"type": "bearer", "secret": "T", "username": "u"}, "request.auth.username"),
        ({"type": "query", "secret": "K"}, "request.auth.name"),
        ({"type": "query", "name": "a&b", "secret": "K"}, "request.auth.name"),
        ({"type": "query", "name": "status", "secret": "K", "query": True}, "request.auth.name"),
        ({"type": "basic"}, "request.auth.secret"),
        ({"type": "basic", "secret": "B", "username": "u"}, "request.auth.secret"),
        ({"type": "basic", "password": {"secret": "P"}}, "request.auth.password"),
        ({"type": "basic", "username": "a:b"}, "request.auth.username"),
        ({"type": "basic", "username": {"secret": "bad name"}}, "request.auth.username.secret"),
        ({"type": "basic", "username": "svc", "password": "hunter2"}, "request.auth.password"),
    ],
)
def test_each_auth_type_takes_its_own_fields(auth: dict[str, Any], field: str) -> None:
    request: dict[str, Any] = {}
    if auth.pop("query", False):
        request["query"] = {auth["name"]: "status"}
    assert field in errors(auth=auth, **request)


def test_a_literal_password_is_refused_with_a_pointer_to_secrets() -> None:
    found = errors(auth={"type": "basic", "username": "svc", "password": "hunter2"})
    assert "{secret: NAME}" in found["request.auth.password"]
    assert "hunter2" not in found["request.auth.password"]


def test_the_query_secret_cannot_share_its_parameter_with_the_url() -> None:
    spec = operation(
        url="https://api.example.com/v1/orders?api_key=public",
        auth={"type": "query", "name": "api_key", "secret": "K"},
    )
    fields = {e.field for e in validate_operation(spec)}
    assert "request.auth.name" in fields


def test_a_spec_stored_before_the_new_auth_fields_still_decodes() -> None:
    stored = msgspec.to_builtins(operation(auth={"type": "bearer", "secret": "T"}))
    auth = stored["request"]["auth"]
    del auth["username"], auth["password"]
    decoded = operation_from_builtins(stored)
    assert decoded.request.secret_names() == ("T",)
    assert validate_operation(decoded) == list[FieldError]()


def test_several_bindings_are_checked_each_and_may_not_share_a_field() -> None:
    key = {"type": "header", "name": "DD-API-KEY", "secret": "DD_API"}
    app = {"type": "header", "name": "DD-APPLICATION-KEY", "secret": "DD_APP"}
    assert errors(auth=[key, app]) == {}
    assert "request.auth[1].name" in errors(auth=[key, {**key, "name": "dd-api-key"}])
    query = {"type": "query", "name": "k", "secret": "A"}
    assert "request.auth[1].name" in errors(auth=[query, query])
    assert "request.auth[0].secret" in errors(auth=[{"type": "bearer"}, app])
    assert "request.auth[1]" in errors(auth=[{"type": "bearer", "secret": "T"}] * 2)
    assert "request.auth" in errors(auth=[])
