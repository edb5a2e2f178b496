"""The world of the approval outcome tests (tests/gateway/approvals): the shop
selling order lines behind approval (``approve_lines``) and its direct twin
(``list_lines``), an agent and an approval key, gateway replicas on one
database, and the approval-key calls that decide and read an approval."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.support.api import Client, auth, grant_egress
from tests.support.approvals import TOKEN, Shop, new_key, order_spec
from tests.support.gateway import Gateway, run_gateway, wait_until
from tests.support.tool_calls import BASE, ok, publish_agent, publish_operation

MCP = "/mcp/v1/default/sales"
APPROVALS = "/v1/default/sales/approvals"
GATED, DIRECT = "approve_lines", "list_lines"
LINES = {"lines": [{"sku": "sku-1", "qty": 2}, {"sku": "sku-2", "qty": 1}]}
NOTE = "Not this week, ask Anna"


def lines_spec(port: int, name: str, *, approval: bool, timeout_ms: int = 5000) -> dict[str, Any]:
    spec = order_spec(port, timeout_ms=timeout_ms)
    spec["name"] = name
    # An array (wrapped for the 2025 revisions), cut to one item (marked crank/truncated).
    spec["response"] = {"select": "lines", "max_items": 1}
    spec["safety"] = {"approval": approval}
    return spec


@dataclass
class Shopfront:
    admin: str
    agent_key: str
    approval_key: str


async def set_up_shopfront(
    client: Client, admin_token: str, shop: Shop, *, timeout_ms: int = 5000
) -> Shopfront:
    h = auth(admin_token)
    await ok(await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=h))
    await ok(await client.put(f"{BASE}/secrets/SHOP_TOKEN", json={"value": TOKEN}, headers=h))
    await grant_egress(client, admin_token, "default", f"127.0.0.1:{shop.port}")
    for name, approval in ((GATED, True), (DIRECT, False)):
        spec = lines_spec(shop.port, name, approval=approval, timeout_ms=timeout_ms)
        await publish_operation(client, admin_token, spec)
    agent_key = await publish_agent(client, admin_token, "sales", [GATED, DIRECT])
    shop.answer = json.dumps(LINES)
    return Shopfront(
        admin_token, agent_key, await new_key(client, admin_token, "sales", "approval")
    )


def gateway_env(shop: Shop, **extra: str) -> dict[str, str]:
    return {
        "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{shop.port}",
        "CRANK_CALL_LOG_FLUSH_MS": "100",
        "CRANK_RATE_LIMIT": "off",
        **extra,
    }


@dataclass
class Replica:
    gateway: Gateway
    http: httpx.AsyncClient


@asynccontextmanager
async def replica(database_url: str, tmp_path: Path, env: dict[str, str]) -> AsyncIterator[Replica]:
    """One gateway process and an HTTP client of it."""
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=20) as http,
    ):
        yield Replica(gateway, http)


def arguments(case: str) -> dict[str, Any]:
    return {"item": f"sku-{case}", "request_id": f"req-{case}"}


async def decide(http: httpx.AsyncClient, key: str, approval_id: str, action: str) -> None:
    body = {"approve": "yes" if action == "approve" else "no", "note": NOTE}
    answer = await http.post(
        f"{APPROVALS}/{approval_id}/{action}",
        json=body,
        headers={"Authorization": f"Bearer {key}"},
    )
    assert answer.status_code == 200, answer.text


async def record(http: httpx.AsyncClient, key: str, approval_id: str) -> dict[str, Any]:
    read = await http.get(f"{APPROVALS}/{approval_id}", headers={"Authorization": f"Bearer {key}"})
    assert read.status_code == 200, read.text
    found: dict[str, Any] = read.json()
    return found


async def finished(http: httpx.AsyncClient, key: str, approval_id: str, status: str) -> None:
    async def done() -> bool:
        return bool((await record(http, key, approval_id))["status"] == status)

    await wait_until(done, timeout_s=20)
