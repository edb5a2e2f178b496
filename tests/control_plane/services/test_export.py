"""``GET /api/v1/workspaces/{ws}/export``: export → apply into an empty workspace → export
gives the same file, for drafts and for the published state; never a secret value."""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import pytest
import yaml

from control_plane.services.export import compact
from shared.engine.spec import OperationSpec
from tests.support.api import Client, auth, make_token
from tests.support.crank_files import SECRETS, SEED

PROVIDER = {
    "name": "corp",
    "issuer": "https://id.example.com/realms/staff/",
    "algorithms": ["ES256"],
    "groups_claim": "groups",
}


def seed_file() -> dict[str, Any]:
    value = yaml.safe_load(SEED)
    assert isinstance(value, dict)
    return value


async def make_workspace(client: Client, admin: str, slug: str, *, secrets: bool) -> str:
    h = auth(admin)
    created = await client.post("/api/v1/workspaces", json={"slug": slug}, headers=h)
    assert created.status_code == 201, created.text
    for name, value in SECRETS.items() if secrets else ():
        stored = await client.put(
            f"/api/v1/workspaces/{slug}/secrets/{name}", json={"value": value}, headers=h
        )
        assert stored.is_success, stored.text
    return f"/api/v1/workspaces/{slug}"


async def apply(client: Client, admin: str, base: str, file: dict[str, Any], **query: str) -> Any:
    response = await client.post(f"{base}/apply", params=query, json=file, headers=auth(admin))
    assert response.status_code == 200, response.text
    return response.json()


async def export(client: Client, token: str, base: str, **query: str) -> Any:
    response = await client.get(f"{base}/export", params=query, headers=auth(token))
    assert response.status_code == 200, response.text
    return response


def without_workspace(document: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k != "workspace"}


@pytest.fixture
async def acme(client: Client, admin_token: str) -> str:
    """Workspace acme: the seed published, then drafts edited so they differ from it."""
    base = await make_workspace(client, admin_token, "acme", secrets=True)
    await apply(client, admin_token, base, seed_file(), publish="true")
    edited = seed_file()
    edited["operations"][3]["title"] = "List orders"
    edited["operations"][0]["response"]["max_items"] = 10
    edited["agents"][1]["description"] = "Looks up and refunds orders."
    edited["agents"][1]["approval_wait_s"] = 30
    edited["identity_providers"] = [PROVIDER]
    edited["operations"][0]["scopes"] = ["rates:read"]
    edited["agents"][1]["auth"] = {"providers": ["corp"], "scopes": ["orders:read"]}
    plan = await apply(client, admin_token, base, edited)
    assert [i["action"] for i in plan["items"]].count("update") == 3
    return base


async def test_drafts_export_applied_to_an_empty_workspace_exports_the_same_file(
    client: Client, admin_token: str, acme: str
) -> None:
    first = (await export(client, admin_token, acme)).json()
    assert first["workspace"] == "acme"
    assert [op["name"] for op in first["operations"]] == [
        "create_refund",
        "delete_draft_order",
        "get_exchange_rate",
        "list_orders",
    ]
    assert [agent["slug"] for agent in first["agents"]] == ["currency-rates", "empty", "sales"]
    by_name = {op["name"]: op for op in first["operations"]}
    assert by_name["list_orders"]["title"] == "List orders"  # the draft, not the version
    assert by_name["create_refund"]["execution_config"] == {
        "timeout_ms": 5000,
        "retries": 1,
        "idempotency": {"argument": "request_id"},  # the header is the default one
    }
    assert by_name["delete_draft_order"]["safety"] == {"approval": True, "confirmation": True}
    assert by_name["get_exchange_rate"]["request"]["auth"] == {
        "type": "header",
        "secret": "PARTNER_KEY",
        "name": "X-Api-Key",
    }
    assert first["agents"][0]["rate_limit"] == {"requests": 60, "per_seconds": 60}
    assert "approval_wait_s" not in first["agents"][0]  # unset: left out, as every default
    assert first["agents"][2]["approval_wait_s"] == 30
    # Identity: the provider with its defaults left out, the agent's auth without
    # agent_keys (true by default), the operation's scopes.
    assert first["identity_providers"] == [PROVIDER]
    assert first["agents"][2]["auth"] == {"providers": ["corp"], "scopes": ["orders:read"]}
    assert by_name["get_exchange_rate"]["scopes"] == ["rates:read"]
    assert "auth" not in first["agents"][0]
    assert "scopes" not in by_name["list_orders"]

    copy_base = await make_workspace(client, admin_token, "copy", secrets=False)
    plan = await apply(client, admin_token, copy_base, without_workspace(first))
    assert {i["action"] for i in plan["items"]} == {"create"}
    again = (await export(client, admin_token, copy_base)).json()
    assert again == {**first, "workspace": "copy"}

    yaml_first = (await export(client, admin_token, acme, format="yaml")).text
    yaml_again = (await export(client, admin_token, copy_base, format="yaml")).text
    assert yaml_first.startswith("workspace: acme\n")
    assert yaml_again == yaml_first.replace("workspace: acme\n", "workspace: copy\n", 1)
    assert yaml.safe_load(yaml_first) == first


async def test_export_applied_back_to_its_own_workspace_changes_nothing(
    client: Client, admin_token: str, acme: str
) -> None:
    document = (await export(client, admin_token, acme)).json()
    plan = await apply(client, admin_token, acme, document, publish="false")
    assert plan["changed"] is False
    assert {i["action"] for i in plan["items"]} == {"unchanged"}


async def test_published_export_reproduces_what_the_gateways_serve(
    client: Client, admin_token: str, acme: str
) -> None:
    published = (await export(client, admin_token, acme, published="true")).json()
    by_name = {op["name"]: op for op in published["operations"]}
    assert "title" not in by_name["list_orders"]  # the version, not the edited draft
    assert by_name["get_exchange_rate"]["response"].get("max_items") is None
    sales = next(a for a in published["agents"] if a["slug"] == "sales")
    assert sales["description"] == "Looks up, refunds and deletes orders."

    # Publishing an operation with auth needs its secret in the target workspace.
    target = await make_workspace(client, admin_token, "replica", secrets=True)
    plan = await apply(client, admin_token, target, without_workspace(published), publish="true")
    # Identity providers have no versions: they take effect when written.
    assert published["identity_providers"] == [PROVIDER]
    assert all(item["publish"] for item in plan["items"] if item["kind"] != "identity_provider")
    again = (await export(client, admin_token, target, published="true")).json()
    assert again == {**published, "workspace": "replica"}
    drafts = (await export(client, admin_token, target)).json()
    assert drafts == again


async def test_defaults_are_left_out_and_secret_values_never_appear(
    client: Client, admin_token: str, acme: str
) -> None:
    for query in ({}, {"published": "true"}, {"format": "yaml"}):
        text = (await export(client, admin_token, acme, **query)).text
        for value in SECRETS.values():
            assert value not in text
            assert value.split(":")[-1] not in text
    document = (await export(client, admin_token, acme)).json()
    list_orders = next(op for op in document["operations"] if op["name"] == "list_orders")
    assert set(list_orders) == {"name", "title", "description", "input", "request", "response"}
    assert list_orders["request"] == {"method": "GET", "url": "https://sales.example/orders"}
    assert list_orders["response"] == {
        "select": "orders[].{id: id, status: status}",
        "max_items": 20,
    }
    empty = next(agent for agent in document["agents"] if agent["slug"] == "empty")
    assert empty == {"slug": "empty"}


def test_compact_leaves_out_exactly_the_fields_equal_to_their_defaults() -> None:
    spec = msgspec.convert(seed_file()["operations"][2], OperationSpec)
    document = compact(spec)
    assert document["execution_config"] == {"retries": 0}
    assert msgspec.convert(document, OperationSpec) == spec
    full = msgspec.to_builtins(spec)
    assert compact(msgspec.convert(copy.deepcopy(full), OperationSpec)) == document


async def test_published_export_drops_bindings_to_operations_without_a_version(
    client: Client, admin_token: str
) -> None:
    base = await make_workspace(client, admin_token, "partial", secrets=True)
    file = seed_file()
    await apply(client, admin_token, base, {"operations": file["operations"][3:]}, publish="true")
    await apply(client, admin_token, base, {**file, "agents": file["agents"][1:2]})
    # Publish the agent only: create_refund and delete_draft_order have drafts, no versions.
    agent = await client.get(f"{base}/agents/sales", headers=auth(admin_token))
    published = await client.post(
        f"{base}/agents/sales/publish", headers=auth(admin_token, agent.headers["etag"])
    )
    assert published.is_success, published.text

    response = await export(client, admin_token, base, published="true")
    assert [op["name"] for op in response.json()["operations"]] == ["list_orders"]
    assert response.json()["agents"][0]["operations"] == ["list_orders"]
    assert response.headers["crank-export-dropped"] == (
        "sales/create_refund, sales/delete_draft_order"
    )
    drafts = await export(client, admin_token, base)
    assert "crank-export-dropped" not in drafts.headers
    assert drafts.json()["agents"][0]["operations"] == [
        "list_orders",
        "create_refund",
        "delete_draft_order",
    ]


async def test_format_follows_the_query_then_accept_and_viewers_may_export(
    client: Client, admin_token: str, database_url: str, acme: str
) -> None:
    viewer = await make_token(database_url, "viewer", "acme")
    default = await export(client, viewer, acme)
    assert default.headers["content-type"].startswith("application/json")
    as_yaml = await client.get(
        f"{acme}/export", headers={**auth(viewer), "Accept": "application/yaml"}
    )
    assert as_yaml.headers["content-type"].startswith("application/yaml")
    assert yaml.safe_load(as_yaml.text) == default.json()
    forced = await client.get(
        f"{acme}/export",
        params={"format": "json"},
        headers={**auth(viewer), "Accept": "application/yaml"},
    )
    assert forced.json() == default.json()

    await make_workspace(client, admin_token, "elsewhere", secrets=False)
    other = await make_token(database_url, "owner", "elsewhere")
    response = await client.get(f"{acme}/export", headers=auth(other))
    assert (response.status_code, response.json()["code"]) == (404, "not_found")
