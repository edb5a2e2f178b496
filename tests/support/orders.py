"""A loopback upstream of test orders that counts every request, and the
operations that change one order: what the DELETE confirmation tests
(test_confirmation.py, test_elicitation.py) publish and call."""

from __future__ import annotations

from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg
from aiohttp import web

from tests.support.api import auth, grant_egress
from tests.support.db import database_url_for, reset_database
from tests.support.gateway import serve_upstream
from tests.support.processes import free_port
from tests.support.tool_calls import ok, publish_operation

ORDER_ID = {"type": "string", "pattern": "^[a-z0-9-]{1,80}$", "description": "Order id"}


@dataclass
class OrdersUpstream:
    port: int = field(default_factory=free_port)
    hits: Counter[str] = field(default_factory=Counter)  # "METHOD /path" -> requests

    async def handle(self, request: web.Request) -> web.Response:
        self.hits[f"{request.method} {request.path}"] += 1
        order_id = request.match_info["order_id"]
        return web.json_response({"id": order_id, "deleted": True, "archived": True})

    def app(self) -> web.Application:
        """``/{kind}/{order_id}`` and ``/{kind}/{order_id}/archive``, any method."""
        app = web.Application()
        app.router.add_route("*", "/{kind}/{order_id}", self.handle)
        app.router.add_route("*", "/{kind}/{order_id}/archive", self.handle)
        return app


def order_operation(name: str, method: str, url: str, **extra: Any) -> dict[str, Any]:
    """An operation that changes one test order at ``url`` (``{order_id}`` in it)."""
    return {
        "name": name,
        "description": f"Changes one test order ({name}). Use when a test asks for it.",
        "input": {
            "type": "object",
            "properties": {"order_id": ORDER_ID},
            "required": ["order_id"],
            "additionalProperties": False,
        },
        "request": {"method": method, "url": url},
        "response": {"select": "{order_id: id, deleted: deleted}"},
        "execution_config": {"timeout_ms": 3000, "retries": 0},
        **extra,
    }


def order_operations(port: int) -> list[dict[str, Any]]:
    """delete_order (DELETE), archive_order (POST, ``confirmation: true``), get_order,
    delete_note and delete_invoice (DELETE with approval), on the upstream at ``port``."""
    up = f"http://127.0.0.1:{port}"
    return [
        order_operation("delete_order", "DELETE", f"{up}/orders/{{order_id}}"),
        order_operation(
            "archive_order",
            "POST",
            f"{up}/orders/{{order_id}}/archive",
            safety={"approval": False, "confirmation": True},
        ),
        order_operation("get_order", "GET", f"{up}/orders/{{order_id}}"),
        order_operation("delete_note", "DELETE", f"{up}/notes/{{order_id}}"),
        order_operation(
            "delete_invoice",
            "DELETE",
            f"{up}/invoices/{{order_id}}",
            safety={"approval": True, "confirmation": "auto"},
        ),
    ]


async def publish_orders(client: Any, admin: str, specs: list[dict[str, Any]], port: int) -> None:
    """Workspace ``default``, egress to the upstream on ``port`` and every spec published."""
    h = auth(admin)
    await ok(await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=h))
    await grant_egress(client, admin, "default", f"127.0.0.1:{port}")
    for spec in specs:
        await publish_operation(client, admin, spec)


@asynccontextmanager
async def fresh_orders(
    pg_server_url: str, run_database: str
) -> AsyncIterator[tuple[str, OrdersUpstream, int]]:
    """The run's database emptied, and the orders upstream served on loopback for the
    block: (database url, upstream, its port)."""
    url = database_url_for(pg_server_url, run_database)
    with psycopg.connect(url, autocommit=True) as conn:
        reset_database(conn, run_database)
    upstream = OrdersUpstream()
    async with serve_upstream(upstream.app(), upstream.port) as port:
        yield url, upstream, port
