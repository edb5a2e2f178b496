"""The soak's catalog: workspace ``soak``, agent ``shop`` with four tools, one per
kind of call in the load mix, all on bench/soak_upstream.py; an agent key, an
approval key and a webhook subscription to the loopback receiver.

- ``lookup_item``: ``GET /items/{ref}`` (a plain call; retried by the executor);
- ``create_payment``: ``POST /payments`` with ``Idempotency-Key`` from
  ``request_id`` (the gateway's idempotency memory; retried, the header makes it safe);
- ``cancel_order``: ``DELETE /orders/{order}`` (a DELETE: two calls, the second
  with the confirmation token);
- ``place_order``: ``POST /orders`` behind approval, ``Idempotency-Key`` from
  ``request_id``, no retries (a human approved one request).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from bench.harness import admin_api

WORKSPACE, AGENT = "soak", "shop"
TIMEOUT_MS = 3000  # the slow fault's answers take up to 5 s: some time out


@dataclass(frozen=True, slots=True)
class Seeded:
    agent_key: str
    approval_key: str
    webhook_secret: str


def _spec(name: str, description: str, request: dict[str, Any], **extra: Any) -> dict[str, Any]:
    properties: dict[str, Any] = extra.pop("properties")
    return {
        "name": name,
        "description": description,
        "input": {
            "type": "object",
            "properties": properties,
            "required": list(properties),
            "additionalProperties": False,
        },
        "request": request,
        "response": {"select": "@"},
        **extra,
    }


def specs(port: int) -> list[dict[str, Any]]:
    base = f"http://127.0.0.1:{port}"
    text = {"type": "string", "pattern": "^[a-z0-9-]{1,64}$"}
    keyed = {"argument": "request_id", "header": "Idempotency-Key"}
    return [
        _spec(
            "lookup_item",
            "Looks up one stock item by reference. Use when the user asks about an item.",
            {"method": "GET", "url": f"{base}/items/{{ref}}"},
            properties={"ref": text},
            execution_config={"timeout_ms": TIMEOUT_MS, "retries": 1},
        ),
        _spec(
            "create_payment",
            "Takes a payment. Use when the user confirms they want to pay.",
            {"method": "POST", "url": f"{base}/payments"},
            properties={"amount": {"type": "integer", "minimum": 1}, "request_id": text},
            execution_config={"timeout_ms": TIMEOUT_MS, "retries": 2, "idempotency": keyed},
        ),
        _spec(
            "cancel_order",
            "Cancels an order. Use when the user asks to cancel one order.",
            {"method": "DELETE", "url": f"{base}/orders/{{order}}"},
            properties={"order": text},
            execution_config={"timeout_ms": TIMEOUT_MS, "retries": 1},
        ),
        _spec(
            "place_order",
            "Places an order for one item. Use when the user confirms a purchase.",
            {"method": "POST", "url": f"{base}/orders"},
            properties={"item": text, "request_id": text},
            execution_config={"timeout_ms": TIMEOUT_MS, "retries": 0, "idempotency": keyed},
            safety={"approval": True},
        ),
    ]


async def seed(url: str, upstream_port: int, receiver_port: int) -> Seeded:
    """Migrates ``url`` and writes the catalog through the control-plane API."""
    async with admin_api(url) as checked:
        await checked("POST", "/api/v1/workspaces", json={"slug": WORKSPACE})
        base = f"/api/v1/workspaces/{WORKSPACE}"
        egress = await checked("GET", f"{base}/egress")
        grants = [f"127.0.0.1:{upstream_port}", f"127.0.0.1:{receiver_port}"]
        await checked(
            "PUT",
            f"{base}/egress/grants",
            json={"grants": grants},
            h={"If-Match": egress.headers["etag"]},
        )
        names = []
        for spec in specs(upstream_port):
            op = await checked("POST", f"{base}/operations", json=spec)
            await checked(
                "POST",
                f"{base}/operations/{spec['name']}/publish",
                h={"If-Match": op.headers["etag"]},
            )
            names.append(spec["name"])
        agent = await checked("POST", f"{base}/agents", json={"slug": AGENT, "operations": names})
        await checked(
            "POST", f"{base}/agents/{AGENT}/publish", h={"If-Match": agent.headers["etag"]}
        )
        keys = [
            (await checked("POST", f"{base}/keys", json={"agent": AGENT, "kind": kind})).json()
            for kind in ("agent", "approval")
        ]
        hook = await checked(
            "POST",
            f"{base}/agents/{AGENT}/webhooks",
            json={"url": f"http://127.0.0.1:{receiver_port}/hooks", "format": "standard"},
        )
        return Seeded(str(keys[0]["key"]), str(keys[1]["key"]), str(hook.json()["secret"]))
