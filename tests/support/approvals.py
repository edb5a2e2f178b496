"""Approvals as the tests set them up: an upstream shop that records (and can
hold) every request, its operation published behind approval, and approved
rows inserted the way the approval gate stores them."""

from __future__ import annotations

import asyncio
import itertools
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web
from psycopg.types.json import Jsonb

from mcp_gateway.approvals import store
from shared.db import Connection, connect
from shared.engine.canonical import arguments_hash
from shared.engine.compiler import compile_operation
from shared.engine.spec import operation_from_builtins
from shared.principals import PrincipalRecord, principal_columns
from tests.support.api import Client, auth, grant_egress
from tests.support.gateway import Gateway, serve_upstream
from tests.support.processes import free_port
from tests.support.tool_calls import BASE, ok, publish_agent, publish_operation

TOKEN = "shop-token-7f3a9c"  # the workspace secret SHOP_TOKEN
TOOL = "create_order"
_ids = itertools.count(1)


def order_spec(port: int, *, timeout_ms: int = 5000) -> dict[str, Any]:
    """create_order at the shop on ``port``: approval required, idempotency key sent."""
    return {
        "name": TOOL,
        "description": (
            "Creates an order for one item. Use when the user confirms a purchase. "
            "Returns the order id and item."
        ),
        "input": {
            "type": "object",
            "properties": {
                "item": {"type": "string", "description": "Item code, e.g. sku-1"},
                "request_id": {"type": "string", "description": "Idempotency key, e.g. r-1"},
            },
            "required": ["item", "request_id"],
            "additionalProperties": False,
        },
        "request": {
            "method": "POST",
            "url": f"http://127.0.0.1:{port}/orders",
            "auth": {"type": "bearer", "secret": "SHOP_TOKEN"},
        },
        "response": {"select": "{id: id, item: item}"},
        "execution_config": {
            "timeout_ms": timeout_ms,
            "retries": 0,
            "idempotency": {"argument": "request_id", "header": "Idempotency-Key"},
        },
        "safety": {"approval": True},
    }


@dataclass
class Seen:
    """One request the shop received."""

    key: str | None  # the Idempotency-Key header
    authorization: str | None
    body: Any


@dataclass
class Shop:
    """An upstream that records every request; the next ``hold`` requests, and the first
    request of each idempotency key in ``hold_first``, wait for ``gate``; a key in
    ``delay_s`` is answered that many seconds late."""

    port: int = field(default_factory=free_port)
    seen: list[Seen] = field(default_factory=list)
    hold: int = 0
    hold_first: set[str] = field(default_factory=set)
    delay_s: dict[str, float] = field(default_factory=dict)
    answered: Counter[str | None] = field(default_factory=Counter)  # answers sent, by key
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    entered: asyncio.Event = field(default_factory=asyncio.Event)
    cancelled: int = 0  # held requests whose client went away
    status: int = 201
    answer: str | None = None  # a raw body instead of the order

    async def orders(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        key = request.headers.get("Idempotency-Key")
        self.seen.append(Seen(key, request.headers.get("Authorization"), body))
        held = self.hold > 0 or key in self.hold_first
        if key in self.hold_first:
            self.hold_first.discard(key)
        elif self.hold > 0:
            self.hold -= 1
        if held:
            self.entered.set()
            try:
                await self.gate.wait()
            except asyncio.CancelledError:
                self.cancelled += 1
                raise
        if key in self.delay_s:
            await asyncio.sleep(self.delay_s[key])
        self.answered[key] += 1
        if self.answer is not None:
            return web.Response(text=self.answer, status=self.status)
        return web.json_response(
            {"id": f"ord-{len(self.seen)}", "item": body["item"], "noise": "x"}, status=self.status
        )


@asynccontextmanager
async def serve_shop() -> AsyncIterator[Shop]:
    state = Shop()
    app = web.Application()
    app.router.add_post("/orders", state.orders)
    async with serve_upstream(app, state.port, handler_cancellation=True):
        try:
            yield state
        finally:
            state.gate.set()  # held requests end before the server does


async def open_shop_workspace(client: httpx.AsyncClient, admin: str, port: int) -> None:
    """Workspace default with the SHOP_TOKEN secret and egress to the shop on ``port``."""
    h = auth(admin)
    await ok(await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=h))
    await ok(await client.put(f"{BASE}/secrets/SHOP_TOKEN", json={"value": TOKEN}, headers=h))
    await grant_egress(client, admin, "default", f"127.0.0.1:{port}")


async def publish_shop(
    client: httpx.AsyncClient, admin: str, port: int, *, timeout_ms: int = 5000
) -> None:
    """Workspace default: the SHOP_TOKEN secret, create_order (approval), agent sales."""
    await open_shop_workspace(client, admin, port)
    await publish_operation(client, admin, order_spec(port, timeout_ms=timeout_ms))
    await publish_agent(client, admin, "sales", [TOOL])


async def new_key(client: Client, admin: str, agent: str, kind: str) -> str:
    """A new API key of ``kind`` (agent or approval) for ``agent`` in workspace default."""
    body = {"agent": agent, "kind": kind}
    created = await ok(await client.post(f"{BASE}/keys", json=body, headers=auth(admin)))
    return str(created.json()["key"])


async def insert_pending(
    database_url: str,
    count: int = 1,
    *,
    max_attempts: int = 3,
    secret: str = TOKEN,
    tamper: bool = False,
    expires_in_s: int = 3600,
    person: PrincipalRecord | None = None,
) -> list[str]:
    """``count`` pending rows of create_order, stored as the approval gate stores them:
    the validated arguments and ``BuiltRequest.redacted()``; oldest first. ``person``:
    asked for by a person who signed in (no key), as a token's call records it."""
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            """SELECT o.id, o.workspace_id, v.version, v.spec, a.id AS agent_id
                 FROM operations o
                 JOIN operation_versions v ON v.operation_id = o.id AND v.version = o.latest_version
                 JOIN agents a ON a.workspace_id = o.workspace_id AND a.slug = 'sales'
                WHERE o.name = %s""",
            (TOOL,),
        )
        op = await cur.fetchone()
        assert op is not None
        compiled = compile_operation(operation_from_builtins(op["spec"]))
        rows = []
        for position in range(count):
            n = next(_ids)
            arguments = compiled.validate({"item": f"sku-{n}", "request_id": f"req-{n}"})
            request = compiled.build(arguments, {"SHOP_TOKEN": secret}).redacted()
            if tamper:
                request["url"] += "?extra=1"
            rows.append(
                (
                    f"approval_{n:032x}",  # the shape new_approval_id makes
                    op["workspace_id"],
                    op["agent_id"],
                    op["id"],
                    TOOL,
                    op["version"],
                    Jsonb(arguments),
                    arguments_hash(arguments),
                    Jsonb(request),
                    max_attempts,
                    expires_in_s,
                    count - position,  # created a millisecond apart, in order
                    *principal_columns(person),
                )
            )
        async with conn.cursor() as insert:
            await insert.executemany(
                """INSERT INTO approvals (id, workspace_id, agent_id, operation_id, tool, version,
                                          arguments, arguments_hash, request, max_attempts,
                                          expires_at, created_at, principal_issuer,
                                          principal_subject, principal_name, client_id)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s,
                           now() + make_interval(secs => %s),
                           clock_timestamp() - make_interval(secs => %s / 1000.0),
                           %s, %s, %s, %s)""",
                rows,
            )
    return [row[0] for row in rows]


async def insert_approved(
    database_url: str,
    count: int = 1,
    *,
    max_attempts: int = 3,
    secret: str = TOKEN,
    tamper: bool = False,
    notify: bool = False,
    person: PrincipalRecord | None = None,
) -> list[str]:
    """``count`` approved rows of create_order (``insert_pending``, then approved)."""
    ids = await insert_pending(
        database_url, count, max_attempts=max_attempts, secret=secret, tamper=tamper, person=person
    )
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            """UPDATE approvals SET status = 'approved', decided_at = now(),
                      decided_by = 'crk_approval_t'
                WHERE id = ANY(%s) AND status = 'pending'""",
            (ids,),
        )
        assert cur.rowcount == count
        if notify:
            await conn.execute(f"NOTIFY {store.CHANNEL}")
    return ids


async def fetch(database_url: str, approval_id: str) -> dict[str, Any]:
    """The approval's status, attempt, lease and result columns."""
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            """SELECT status, attempt, lease_owner, lease_expires_at, response_payload,
                      completed_at FROM approvals WHERE id = %s""",
            (approval_id,),
        )
        row = await cur.fetchone()
    assert row is not None
    return row


async def execute(database_url: str, sql: str, *params: Any) -> int:
    """One statement in autocommit; the rows it changed."""
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(sql.encode(), params)
        return cur.rowcount


async def expire_lease(database_url: str, approval_id: str) -> None:
    """The lease runs out now (executing → executing, the renewal edge)."""
    changed = await execute(
        database_url,
        "UPDATE approvals SET lease_expires_at = now() - interval '1 second' WHERE id = %s",
        approval_id,
    )
    assert changed == 1


async def owner_pid(database_url: str, approval_id: str) -> int:
    """The pid in the lease owner (``host-pid-random``, mcp_gateway.upkeep.replicas)."""
    owner = (await fetch(database_url, approval_id))["lease_owner"]
    return int(owner.rsplit("-", 2)[1])


def runs_in(gateway: Gateway, pid: int) -> bool:
    """``pid`` is the gateway's process or one of its granian workers."""
    if pid == gateway.process.pid:
        return True
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1]) == gateway.process.pid


async def status_is(database_url: str, approval_id: str, status: str) -> bool:
    return bool((await fetch(database_url, approval_id))["status"] == status)


async def behind_the_trigger(conn: Connection, statement: str, params: Any = ()) -> None:
    """Run an UPDATE the transition trigger would skip (e.g. backdating a pending
    row's times): the trigger is off only inside this transaction, which holds
    the table's exclusive lock, so no other session ever sees it off."""
    async with conn.transaction():
        await conn.execute("ALTER TABLE approvals DISABLE TRIGGER approvals_transition")
        await conn.execute(statement.encode(), params)
        await conn.execute("ALTER TABLE approvals ENABLE TRIGGER approvals_transition")
