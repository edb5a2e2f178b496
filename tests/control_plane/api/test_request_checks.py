"""Input PostgreSQL or the decoder cannot take is a 400 before any handler runs."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from tests.support.api import Client, auth

WS = "/api/v1/workspaces/acme"


@pytest.fixture
async def acme(client: Client, admin_token: str) -> None:
    created = await client.post(
        "/api/v1/workspaces", json={"slug": "acme"}, headers=auth(admin_token)
    )
    assert created.status_code == 201, created.text


def operation(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": "get_order",
        "description": "Gets one order by id. Use when the user asks about one order.",
        "input": {
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "The order id"}},
            "required": ["order_id"],
        },
        "request": {"method": "GET", "url": "https://api.example.com/orders/{order_id}"},
    }
    spec.update(changes)
    return spec


def refused(response: Any) -> list[str]:
    """The field errors of a 400 validation_failed answer."""
    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "validation_failed"
    return [error["field"] for error in body["errors"]]


@pytest.mark.usefixtures("acme")
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/api/v1/workspaces/ac%00me"),
        ("GET", f"{WS}/operations/get%00order"),
        ("GET", f"{WS}/agents/ra%00tes"),
        ("DELETE", f"{WS}/secrets/KEY%00"),
    ],
)
async def test_nul_in_a_path_parameter_is_400(
    client: Client, admin_token: str, method: str, path: str
) -> None:
    response = await client.request(method, path, headers=auth(admin_token))
    assert refused(response)


@pytest.mark.usefixtures("acme")
async def test_nul_in_the_query_string_is_400_naming_the_parameter(
    client: Client, admin_token: str
) -> None:
    response = await client.get(f"{WS}/operations?cursor=a%00b", headers=auth(admin_token))
    assert refused(response) == ["cursor"]
    response = await client.get(f"{WS}/keys?agent=%00", headers=auth(admin_token))
    assert refused(response) == ["agent"]


@pytest.mark.usefixtures("acme")
async def test_nul_in_any_json_string_is_400_naming_where(client: Client, admin_token: str) -> None:
    description = await client.post(
        f"{WS}/operations",
        json=operation(description="Gets one order.\x00 Use when asked."),
        headers=auth(admin_token),
    )
    assert refused(description) == ["description"]
    nested = operation()
    nested["input"]["properties"]["order_id"]["description"] = "id\x00"
    deep = await client.post(f"{WS}/operations", json=nested, headers=auth(admin_token))
    assert refused(deep) == ["input.properties.order_id.description"]
    key = operation()
    key["request"]["headers"] = {"X-\x00": "v"}
    assert refused(await client.post(f"{WS}/operations", json=key, headers=auth(admin_token)))
    secret = await client.put(
        f"{WS}/secrets/KEY", json={"value": "a\x00b"}, headers=auth(admin_token)
    )
    assert refused(secret) == ["value"]
    listed = await client.get(f"{WS}/operations", headers=auth(admin_token))
    assert listed.json()["items"] == []


@pytest.mark.usefixtures("acme")
@pytest.mark.parametrize("depth", [80, 5000, 100_000])
async def test_deeply_nested_json_is_400_not_a_crash(
    client: Client, admin_token: str, depth: int
) -> None:
    nested = "[" * depth + "]" * depth
    body = (
        '{"name": "get_order", "description": "Gets an order. Use when asked.", '
        f'"input": {{"type": "object", "default": {nested}}}, '
        '"request": {"method": "GET", "url": "https://api.example.com/orders"}}'
    )
    response = await client.post(
        f"{WS}/operations",
        content=body.encode(),
        headers={**auth(admin_token), "Content-Type": "application/json"},
    )
    assert refused(response)


@pytest.mark.usefixtures("acme")
async def test_json_nested_within_the_limit_is_accepted(client: Client, admin_token: str) -> None:
    spec = operation()
    value: Any = "leaf"
    for _ in range(40):
        value = [value]
    spec["input"]["properties"]["order_id"]["examples"] = [value]
    response = await client.post(f"{WS}/operations", json=spec, headers=auth(admin_token))
    assert response.status_code == 201, response.text


@pytest.mark.usefixtures("acme")
@pytest.mark.parametrize("last_id", [str(2**63), str(10**30), "9" * 5000])
async def test_an_audit_cursor_out_of_the_bigint_range_is_400(
    client: Client, admin_token: str, last_id: str
) -> None:
    cursor = base64.urlsafe_b64encode(f"a:{last_id}".encode()).decode().rstrip("=")
    response = await client.get(f"{WS}/audit", params={"cursor": cursor}, headers=auth(admin_token))
    assert refused(response) == ["cursor"]


@pytest.mark.usefixtures("acme")
async def test_a_secret_name_with_a_trailing_newline_is_400(
    client: Client, admin_token: str
) -> None:
    response = await client.put(
        f"{WS}/secrets/KEY%0A", json={"value": "v"}, headers=auth(admin_token)
    )
    assert refused(response) == ["name"]


@pytest.mark.usefixtures("acme")
async def test_an_operation_name_with_a_trailing_newline_is_400(
    client: Client, admin_token: str
) -> None:
    response = await client.post(
        f"{WS}/operations", json=operation(name="get_order\n"), headers=auth(admin_token)
    )
    assert refused(response) == ["name"]


@pytest.mark.usefixtures("acme")
async def test_input_properties_of_the_wrong_type_is_400(client: Client, admin_token: str) -> None:
    spec = operation()
    spec["input"]["properties"] = 5
    response = await client.post(f"{WS}/operations", json=spec, headers=auth(admin_token))
    assert refused(response) == ["input.properties"]


@pytest.mark.usefixtures("acme")
@pytest.mark.parametrize(
    "path", ["/api/v1/workspaces", f"{WS}/operations", f"{WS}/agents", f"{WS}/keys"]
)
async def test_a_body_route_sent_no_body_says_so(
    client: Client, admin_token: str, path: str
) -> None:
    response = await client.post(path, headers=auth(admin_token))
    assert "" in refused(response)  # Litestar may list other parameters it gave up on too
    # Not Litestar's bare KeyError text ("'data'"): what was wrong, in words.
    messages = {e["field"]: e["message"] for e in response.json()["errors"]}
    assert messages[""] == "this request needs a JSON body; none was sent"
