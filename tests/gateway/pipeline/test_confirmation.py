"""DELETE confirmation through real gateway processes.

Two gateways (A and B, one database) serve the module, as two replicas do;
the upstream is a local aiohttp app on loopback, allowlisted by
CRANK_UPSTREAM_ALLOWLIST, that counts every request it gets. Gateway B runs
with CRANK_CONFIRMATION_TTL_S=60 to show the lifetime is configurable.

Every test uses its own order ids, so the counts of one test are its own.
The demo's ``sales_delete_draft_order`` runs in a database of its own
(``empty_database_url``), so it never disturbs the module's world.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import re
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import httpx2
import psycopg
import pytest
from aiohttp import web
from litestar import Litestar
from litestar.testing import AsyncTestClient
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from mcp_gateway.pipeline.confirmation_tokens import ConfirmationSigner
from shared.db import connect
from shared.engine.canonical import arguments_hash
from shared.engine.errors import suggested_action
from shared.engine.request_builder import CONFIRMATION_ARGUMENT, CONFIRMATION_TOKEN_PATTERN
from shared.migrate import migrate
from tests.support.api import auth, grant_egress, make_token
from tests.support.db import TEST_SECRET_KEY, database_url_for, reset_database
from tests.support.gateway import Gateway, demo_gateway, run_gateway, wait_until
from tests.support.mcp import META, modern
from tests.support.orders import OrdersUpstream, order_operations
from tests.support.tool_calls import (
    BASE,
    ERAS,
    Caller,
    assert_tool_error,
    confirmed,
    legacy_headers,
    ok,
    open_session,
    publish_agent,
    publish_operation,
    rpc,
    token_of,
)

PATH = "/mcp/v1/default/ops"
OTHER_PATH = "/mcp/v1/default/other-ops"
B_TTL_S = 60


@dataclass
class World:
    url: str
    a: Gateway
    b: Gateway
    upstream: OrdersUpstream
    key: str
    other_key: str
    admin: str
    http: httpx.AsyncClient

    def caller(self, gateway: Gateway | None = None, key: str | None = None) -> Caller:
        path = OTHER_PATH if key == self.other_key else PATH
        return Caller(self.http, (gateway or self.a).url + path, key or self.key)

    async def ids(self, tool: str) -> dict[str, int]:
        """The agent, operation and latest version a token for ``tool`` of "ops" names."""
        async with await connect(self.url) as conn:
            cur = await conn.execute(
                """SELECT a.id AS agent_id, o.id AS operation_id, o.latest_version AS version
                     FROM agents a, operations o WHERE a.slug = 'ops' AND o.name = %s""",
                (tool,),
            )
            row = await cur.fetchone()
        assert row is not None
        return dict(row)


@pytest.fixture(scope="module")
async def world(
    pg_server_url: str, run_database: str, app: Litestar, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    """The run's database used directly (as test_tool_errors.py here does):
    no test here may use the function-scoped ``database_url``."""
    url = database_url_for(pg_server_url, run_database)
    with psycopg.connect(url, autocommit=True) as conn:
        reset_database(conn, run_database)
    upstream = OrdersUpstream()
    runner = web.AppRunner(upstream.app(), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", upstream.port).start()

    admin = await make_token(url, "admin")
    specs = order_operations(upstream.port)
    async with AsyncTestClient(app=app) as client:
        await ok(
            await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=auth(admin))
        )
        await grant_egress(client, admin, "default", f"127.0.0.1:{upstream.port}")
        for spec in specs:
            await publish_operation(client, admin, spec)
        key = await publish_agent(client, admin, "ops", [s["name"] for s in specs])
        other_key = await publish_agent(client, admin, "other-ops", ["delete_order"])

    env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream.port}", "CRANK_RATE_LIMIT": "off"}
    tmp = tmp_path_factory.mktemp("confirmation")
    try:
        async with (
            run_gateway(url, tmp, extra_env=env) as a,
            run_gateway(url, tmp, extra_env=env | {"CRANK_CONFIRMATION_TTL_S": str(B_TTL_S)}) as b,
            httpx.AsyncClient(timeout=30) as http,
        ):
            yield World(url, a, b, upstream, key, other_key, admin, http)
    finally:
        await runner.cleanup()


def assert_invalid(result: dict[str, Any]) -> None:
    error = assert_tool_error(result, "confirmation_invalid")
    assert error["suggested_action"] == suggested_action("confirmation_invalid")


async def list_tools(world: World, era: str) -> dict[str, dict[str, Any]]:
    path = world.a.url + PATH
    if era == "modern":
        body = rpc("tools/list", {"_meta": META})
        response = await world.http.post(path, json=body, headers=modern(world.key, "tools/list"))
    else:
        session = await open_session(world.http, path, world.key)
        response = await world.http.post(
            path, json=rpc("tools/list", {}), headers=legacy_headers(world.key, session)
        )
    assert response.status_code == 200, response.text
    return {tool["name"]: tool for tool in response.json()["result"]["tools"]}


@pytest.mark.parametrize("era", ERAS)
async def test_the_token_argument_is_declared_where_a_confirmation_is_required(
    world: World, era: str
) -> None:
    tools = await list_tools(world, era)
    for name in ("delete_order", "archive_order", "delete_note", "delete_invoice"):
        declared = tools[name]["inputSchema"]["properties"][CONFIRMATION_ARGUMENT]
        assert declared["type"] == "string"
        assert declared["pattern"] == CONFIRMATION_TOKEN_PATTERN
        assert CONFIRMATION_ARGUMENT not in tools[name]["inputSchema"].get("required", [])
        assert tools[name]["annotations"]["destructiveHint"] is True
    assert CONFIRMATION_ARGUMENT not in tools["get_order"]["inputSchema"]["properties"]


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("tool", ["delete_order", "archive_order"])
async def test_the_first_call_asks_for_confirmation_and_the_second_executes(
    world: World, era: str, tool: str
) -> None:
    """DELETE by default; any method with ``safety.confirmation: true``."""
    order = f"first-{tool}-{era}".replace("_", "-")
    args = {"order_id": order}
    caller = world.caller()
    token = token_of(await caller.call(era, tool, args))
    assert sum(n for hit, n in world.upstream.hits.items() if order in hit) == 0

    done = await caller.call(era, tool, confirmed(args, token))
    assert done["isError"] is False, done
    assert done["structuredContent"] == {"order_id": order, "deleted": True}
    assert sum(n for hit, n in world.upstream.hits.items() if order in hit) == 1


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_sdk_reads_the_token_from_its_own_field(world: World, mode: str) -> None:
    """The token in ``confirmation_token`` as well as in the seed's message; recoverable,
    since the suggested action is to call again with it."""
    order = f"sdk-field-{mode}"
    args = {"order_id": order}
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {world.key}"}) as http:
        transport = streamable_http_client(world.a.url + PATH, http_client=http)
        async with McpClient(transport, mode=mode) as mcp:
            asked = await mcp.call_tool("delete_order", args)
            assert asked.is_error is True
            error = asked.structured_content
            assert error is not None
            assert error["error_code"] == "confirmation_required"
            assert error["recoverable"] is True
            token = error["confirmation_token"]
            assert re.fullmatch(CONFIRMATION_TOKEN_PATTERN, token)
            assert f'{CONFIRMATION_ARGUMENT}="{token}"' in error["message"]
            assert sum(n for hit, n in world.upstream.hits.items() if order in hit) == 0
            done = await mcp.call_tool("delete_order", confirmed(args, token))
    assert done.is_error is False
    assert done.structured_content == {"order_id": order, "deleted": True}
    assert sum(n for hit, n in world.upstream.hits.items() if order in hit) == 1


async def test_a_used_token_is_refused_and_nothing_is_sent_again(world: World) -> None:
    args = {"order_id": "used-once"}
    caller = world.caller()
    token = token_of(await caller.call("legacy", "delete_order", args))
    assert (await caller.call("legacy", "delete_order", confirmed(args, token)))["isError"] is False
    for gateway in (world.a, world.b):  # used on any replica is used on all
        assert_invalid(
            await world.caller(gateway).call("modern", "delete_order", confirmed(args, token))
        )
    assert world.upstream.hits["DELETE /orders/used-once"] == 1

    # What the suggested action says: without the token, a new one, which works.
    again = token_of(await caller.call("legacy", "delete_order", args))
    assert again != token
    assert (await caller.call("legacy", "delete_order", confirmed(args, again)))["isError"] is False
    assert world.upstream.hits["DELETE /orders/used-once"] == 2


async def test_a_token_for_other_arguments_is_refused(world: World) -> None:
    caller = world.caller()
    token = token_of(await caller.call("legacy", "delete_order", {"order_id": "args-a"}))
    assert_invalid(
        await caller.call("legacy", "delete_order", confirmed({"order_id": "args-b"}, token))
    )
    # Refused, the token was not spent: the call it was issued for still runs.
    ran = await caller.call("legacy", "delete_order", confirmed({"order_id": "args-a"}, token))
    assert ran["isError"] is False, ran
    assert world.upstream.hits["DELETE /orders/args-b"] == 0
    assert world.upstream.hits["DELETE /orders/args-a"] == 1


async def test_a_token_for_another_operation_is_refused(world: World) -> None:
    caller = world.caller()
    args = {"order_id": "other-op"}
    token = token_of(await caller.call("modern", "delete_order", args))
    assert_invalid(await caller.call("modern", "archive_order", confirmed(args, token)))
    assert world.upstream.hits["POST /orders/other-op/archive"] == 0


async def test_a_token_of_another_agent_is_refused(world: World) -> None:
    args = {"order_id": "other-agent"}
    token = token_of(await world.caller().call("legacy", "delete_order", args))
    other = world.caller(key=world.other_key)
    assert_invalid(await other.call("legacy", "delete_order", confirmed(args, token)))
    assert world.upstream.hits["DELETE /orders/other-agent"] == 0


async def test_an_expired_token_is_refused(world: World) -> None:
    """Expiry is inside the signed token: one issued 301 s ago with the server's
    key is what the clock would produce, without waiting for it."""
    args = {"order_id": "expired"}
    ids = await world.ids("delete_order")
    signer = ConfirmationSigner(TEST_SECRET_KEY, ttl_s=300)
    old = signer.issue(**ids, digest=arguments_hash(args), now=time.time() - 301)
    fresh = signer.issue(**ids, digest=arguments_hash(args), now=time.time() - 1)
    caller = world.caller()
    assert_invalid(await caller.call("legacy", "delete_order", confirmed(args, old)))
    assert world.upstream.hits["DELETE /orders/expired"] == 0
    # The same signer one second ago: accepted, so only the age made the difference.
    assert (await caller.call("legacy", "delete_order", confirmed(args, fresh)))["isError"] is False


async def test_the_token_lifetime_is_configurable(world: World) -> None:
    args = {"order_id": "ttl"}
    ids = await world.ids("delete_order")
    digest = arguments_hash(args)
    checker = ConfirmationSigner(TEST_SECRET_KEY, ttl_s=1)  # verifying ignores its own ttl
    for gateway, ttl in ((world.a, 300), (world.b, B_TTL_S)):
        token = token_of(await world.caller(gateway).call("legacy", "delete_order", args))
        expires = checker.verify(token, **ids, digest=digest).expires_at.timestamp()
        assert ttl - 5 <= expires - time.time() <= ttl


@pytest.mark.parametrize(
    "token",
    [
        "ct_" + base64.urlsafe_b64encode(secrets.token_bytes(39)).rstrip(b"=").decode(),
        "ct_AAAA",
        "ct_" + "A" * 500,
    ],
    ids=["random", "short", "long"],
)
async def test_a_forged_token_is_refused(world: World, token: str) -> None:
    args = {"order_id": "forged"}
    assert_invalid(await world.caller().call("modern", "delete_order", confirmed(args, token)))
    assert world.upstream.hits["DELETE /orders/forged"] == 0


@pytest.mark.parametrize("token", ["ct_abc+def", "token", "", 42])
async def test_a_token_of_the_wrong_shape_is_an_argument_error(world: World, token: Any) -> None:
    args = {"order_id": "wrong-shape"}
    result = await world.caller().call("legacy", "delete_order", confirmed(args, token))
    error = assert_tool_error(result, "invalid_arguments")
    assert CONFIRMATION_ARGUMENT in error["message"]
    assert world.upstream.hits["DELETE /orders/wrong-shape"] == 0


async def test_a_token_from_before_a_new_version_is_refused(world: World, app: Litestar) -> None:
    args = {"order_id": "versioned"}
    caller = world.caller()
    token = token_of(await caller.call("legacy", "delete_note", args))
    spec = order_operations(world.upstream.port)[3]
    spec["description"] = "Deletes one test note, second version. Use when a test asks for it."
    async with AsyncTestClient(app=app) as client:
        current = await ok(
            await client.get(f"{BASE}/operations/delete_note", headers=auth(world.admin))
        )
        updated = await ok(
            await client.put(
                f"{BASE}/operations/delete_note",
                json=spec,
                headers=auth(world.admin, current.headers["etag"]),
            )
        )
        await ok(
            await client.post(
                f"{BASE}/operations/delete_note/publish",
                headers=auth(world.admin, updated.headers["etag"]),
            )
        )

    async def serves_v2() -> bool:
        description: str = (await list_tools(world, "legacy"))["delete_note"]["description"]
        return bool(description == spec["description"])

    await wait_until(serves_v2, timeout_s=15)
    assert_invalid(await caller.call("legacy", "delete_note", confirmed(args, token)))
    assert world.upstream.hits["DELETE /notes/versioned"] == 0
    again = token_of(await caller.call("legacy", "delete_note", args))
    assert (await caller.call("legacy", "delete_note", confirmed(args, again)))["isError"] is False
    assert world.upstream.hits["DELETE /notes/versioned"] == 1


def _token_hash(token: str) -> bytes:
    body = token[3:]
    return hashlib.sha256(base64.urlsafe_b64decode(body + "=" * (-len(body) % 4))).digest()


async def test_two_concurrent_uses_of_one_token_on_two_gateways_execute_once(
    world: World,
) -> None:
    """The interleaving is forced: a transaction of the test holds the token's
    row uncommitted until both gateways wait on it, then rolls back; of the two
    inserts that then race, exactly one wins, and the upstream sees one DELETE."""
    args = {"order_id": "concurrent"}
    token = token_of(await world.caller(world.a).call("legacy", "delete_order", args))
    holder = await psycopg.AsyncConnection.connect(world.url)
    try:
        await holder.execute(
            "INSERT INTO confirmation_uses (token_hash, expires_at) VALUES (%s, now())",
            (_token_hash(token),),
        )
        uses = [
            asyncio.create_task(
                world.caller(gateway).call(era, "delete_order", confirmed(args, token))
            )
            for gateway, era in ((world.a, "legacy"), (world.b, "modern"))
        ]

        async def both_wait() -> bool:
            async with await connect(world.url) as conn:
                cur = await conn.execute(
                    """SELECT count(*) AS n FROM pg_stat_activity
                        WHERE wait_event_type = 'Lock' AND query LIKE '%%confirmation_uses%%'
                          AND pid <> pg_backend_pid()"""
                )
                row = await cur.fetchone()
            return row is not None and row["n"] == 2

        await wait_until(both_wait, timeout_s=10)
        assert world.upstream.hits["DELETE /orders/concurrent"] == 0
        await holder.rollback()
        results = await asyncio.wait_for(asyncio.gather(*uses), 20)
    finally:
        await holder.close()
    outcomes = sorted(
        "ok" if not r["isError"] else r["structuredContent"]["error_code"] for r in results
    )
    assert outcomes == ["confirmation_invalid", "ok"]
    assert world.upstream.hits["DELETE /orders/concurrent"] == 1


async def test_many_concurrent_uses_across_two_gateways_each_execute_once(world: World) -> None:
    tokens = []
    for n in range(6):
        args = {"order_id": f"race-{n}"}
        tokens.append((args, token_of(await world.caller().call("legacy", "delete_order", args))))
    calls = [
        world.caller(gateway).call(era, "delete_order", confirmed(args, token))
        for args, token in tokens
        for gateway, era in ((world.a, "legacy"), (world.b, "modern"), (world.b, "legacy"))
    ]
    results = await asyncio.wait_for(asyncio.gather(*calls), 30)
    assert sum(not r["isError"] for r in results) == 6
    for r in results:
        if r["isError"]:
            assert_invalid(r)
    for n in range(6):
        assert world.upstream.hits[f"DELETE /orders/race-{n}"] == 1


async def test_the_call_log_records_each_confirmation_outcome(world: World) -> None:
    args = {"order_id": "logged"}
    caller = world.caller()
    token = token_of(await caller.call("legacy", "delete_order", args))
    assert (await caller.call("legacy", "delete_order", confirmed(args, token)))["isError"] is False
    assert_invalid(await caller.call("legacy", "delete_order", confirmed(args, token)))

    async def logged() -> list[str]:
        async with await connect(world.url) as conn:
            cur = await conn.execute(
                """SELECT outcome FROM call_log WHERE tool = 'delete_order'
                    AND called_at > now() - interval '1 minute' ORDER BY called_at, id"""
            )
            return [row["outcome"] for row in await cur.fetchall()]

    async def written() -> bool:
        outcomes = await logged()
        return outcomes[-3:] == ["confirmation_required", "ok", "confirmation_invalid"]

    await wait_until(written, timeout_s=10)


async def test_delete_with_approval_asks_for_confirmation_first_then_for_approval(
    world: World,
) -> None:
    """The gate order: validate → confirmation → approval → idempotency."""
    args = {"order_id": "approve-me"}
    caller = world.caller()
    token = token_of(await caller.call("legacy", "delete_invoice", args))

    async def approvals() -> int:
        async with await connect(world.url) as conn:
            cur = await conn.execute("SELECT count(*) AS n FROM approvals")
            row = await cur.fetchone()
        assert row is not None
        return int(row["n"])

    assert await approvals() == 0  # the confirmation gate answered before any approval row
    second = await caller.call("legacy", "delete_invoice", confirmed(args, token))
    if second["isError"] and second["structuredContent"]["error_code"] == "internal_error":
        pytest.skip("the approval gate (mcp_gateway.approvals) is not in this build yet")
    assert second["isError"] is False, second
    assert second["structuredContent"]["status"] == "approval_required"
    assert await approvals() == 1
    assert world.upstream.hits["DELETE /invoices/approve-me"] == 0


# The demo, end to end --------------------------------------------------------


async def test_the_demo_deletes_a_draft_order_after_confirmation(
    empty_database_url: str, tmp_path: Path
) -> None:
    await migrate(empty_database_url)
    async with (
        demo_gateway(empty_database_url, tmp_path) as demo,
        httpx.AsyncClient(base_url=demo.gateway.url, timeout=20) as http,
    ):
        caller = Caller(http, "/mcp/v1/default/sales", demo.agent_key)
        args = {"order_id": "ord_123"}  # the demo's draft order
        token = token_of(await caller.call("legacy", "sales_delete_draft_order", args))
        still_there = await caller.call("legacy", "sales_get_order", args)
        assert still_there["structuredContent"]["status"] == "draft"

        deleted = await caller.call("modern", "sales_delete_draft_order", confirmed(args, token))
        assert deleted["isError"] is False, deleted
        assert deleted["structuredContent"] == {"order_id": "ord_123", "deleted": True}
        assert_tool_error(
            await caller.call("legacy", "sales_get_order", args), "upstream_not_found"
        )

        # A paid order: confirmed, then refused by the API (409), never deleted.
        paid = {"order_id": "ord_456"}
        token = token_of(await caller.call("legacy", "sales_delete_draft_order", paid))
        refused = await caller.call("legacy", "sales_delete_draft_order", confirmed(paid, token))
        assert_tool_error(refused, "upstream_conflict")
