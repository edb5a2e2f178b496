"""Operations the tests make through the admin API: a small valid spec, and the
requests that create, change and publish it (in process, or over HTTP to a server)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.api import auth


def order_spec(name: str = "get_order", **changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "title": "Get order",
        "description": "Gets one order by id. Use when the user asks about a specific order.",
        "input": {
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "The order id"}},
            "required": ["order_id"],
            "additionalProperties": False,
        },
        "request": {"method": "GET", "url": "https://api.example.com/orders/{order_id}"},
    }
    spec.update(changes)
    return spec


def operations_path(workspace: str, name: str = "") -> str:
    base = f"/api/v1/workspaces/{workspace}/operations"
    return f"{base}/{name}" if name else base


async def create_operation(
    client: httpx.AsyncClient, token: str, workspace: str, spec: dict[str, Any]
) -> str:
    """A new operation (its draft) through the API; its ETag."""
    answer = await client.post(operations_path(workspace), json=spec, headers=auth(token))
    assert answer.status_code == 201, answer.text
    return answer.headers["etag"]


async def replace_draft(
    client: httpx.AsyncClient, token: str, workspace: str, spec: dict[str, Any]
) -> str:
    """The draft replaced by ``spec`` at its current revision; the new ETag."""
    path = operations_path(workspace, spec["name"])
    current = await client.get(path, headers=auth(token))
    answer = await client.put(path, json=spec, headers=auth(token, current.headers["etag"]))
    assert answer.status_code == 200, answer.text
    return answer.headers["etag"]


async def publish_draft(client: httpx.AsyncClient, token: str, workspace: str, name: str) -> int:
    """The draft published through the API; the latest version after it."""
    path = operations_path(workspace, name)
    current = await client.get(path, headers=auth(token))
    answer = await client.post(f"{path}/publish", headers=auth(token, current.headers["etag"]))
    assert answer.status_code in (200, 201), answer.text
    version: int = answer.json()["version"]
    return version


async def read_operation(
    client: httpx.AsyncClient, token: str, workspace: str, name: str
) -> dict[str, Any]:
    answer = await client.get(operations_path(workspace, name), headers=auth(token))
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body
