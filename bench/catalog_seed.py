"""Seeds a catalog at scale for bench/catalog_scale.py: workspaces, operations
published once, agents bound to them and published, one key per agent.

Workspaces go through the control-plane app in process (the admin API), the
operations straight into their tables in one transaction (10,000 API calls
would take minutes and measure the control plane, not the gateway); agents,
their publishes and keys through the admin API again, so what the gateway
reads is what the control plane writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from psycopg.types.json import Jsonb

from bench.harness import admin_api, admin_token
from shared.db import connect
from shared.engine.spec import spec_to_builtins


@dataclass(frozen=True, slots=True)
class Seeded:
    admin: str  # admin token
    keys: dict[tuple[str, str], str]  # (workspace, agent) -> agent key
    operations: dict[tuple[str, str], list[str]]  # (workspace, agent) -> its operation names


def operation_spec(ws: int, index: int, marker: str = "") -> dict[str, Any]:
    """A realistic tool: a few typed arguments, one pattern, a GET with a query."""
    name = f"ws{ws}_op_{index:05d}"
    return {
        "name": name,
        "title": f"Operation {index} of workspace {ws}",
        "description": (
            f"Looks up record {index} in the inventory of workspace {ws}. Use when the user "
            f"asks about stock levels, prices or the supplier of an item.{marker}"
        ),
        "input": {
            "type": "object",
            "properties": {
                "sku": {"type": "string", "pattern": "^[A-Z]{3}-[0-9]{4}$", "description": "SKU"},
                "warehouse": {"type": "string", "enum": ["north", "south", "east", "west"]},
                "limit": {"type": "integer", "minimum": 1, "maximum": 100},
                "include_history": {"type": "boolean"},
            },
            "required": ["sku"],
            "additionalProperties": False,
        },
        "request": {
            "method": "GET",
            "url": f"https://inventory.example.com/v1/ws{ws}/items/{index}",
            "query": {"sku": "sku", "warehouse": "warehouse", "limit": "limit"},
            "headers": {"Accept": "application/json"},
        },
        "response": {"select": "{sku: sku, stock: stock, price: price}", "max_items": 50},
    }


def stored(spec: dict[str, Any]) -> dict[str, Any]:
    """The spec as the control plane stores it (every field present)."""
    from shared.engine.spec import OperationSpec

    return spec_to_builtins(msgspec.convert(spec, OperationSpec))


async def seed(
    url: str, workspaces: int, agents_per_workspace: int, tools_per_agent: int
) -> Seeded:
    keys: dict[tuple[str, str], str] = {}
    operations: dict[tuple[str, str], list[str]] = {}
    admin = await admin_token(url)
    async with admin_api(url, token=admin) as checked:
        for w in range(workspaces):
            await checked("POST", "/api/v1/workspaces", json={"slug": f"ws{w}"})
        async with await connect(url) as conn:
            cur = await conn.execute("SELECT id, slug FROM workspaces")
            ids = {r["slug"]: r["id"] for r in await cur.fetchall()}
            for w in range(workspaces):
                count = agents_per_workspace * tools_per_agent
                specs = [stored(operation_spec(w, i)) for i in range(count)]
                async with conn.cursor() as cur:
                    await cur.executemany(
                        """INSERT INTO operations (workspace_id, name, draft, latest_version)
                           VALUES (%s, %s, %s, 1)""",
                        [(ids[f"ws{w}"], s["name"], Jsonb(s)) for s in specs],
                    )
                    await cur.execute(
                        """INSERT INTO operation_versions (operation_id, version, spec, published_by)
                           SELECT id, 1, draft, 'bench' FROM operations WHERE workspace_id = %s""",
                        (ids[f"ws{w}"],),
                    )
            await conn.execute("SELECT crank_bump_catalog()")
            await conn.commit()
        for w in range(workspaces):
            base = f"/api/v1/workspaces/ws{w}"
            for a in range(agents_per_workspace):
                slug = f"agent-{a}"
                names = [
                    f"ws{w}_op_{i:05d}"
                    for i in range(a * tools_per_agent, (a + 1) * tools_per_agent)
                ]
                agent = await checked(
                    "POST", f"{base}/agents", json={"slug": slug, "operations": names}
                )
                await checked(
                    "POST", f"{base}/agents/{slug}/publish", h={"If-Match": agent.headers["etag"]}
                )
                key = await checked("POST", f"{base}/keys", json={"agent": slug})
                keys[(f"ws{w}", slug)] = str(key.json()["key"])
                operations[(f"ws{w}", slug)] = names
    return Seeded(admin=admin, keys=keys, operations=operations)
