"""The gateway's idempotency memory through real gateway processes.

Two gateways (A and B, one database) serve the module, as two replicas do;
B keeps records for CRANK_IDEMPOTENCY_RETENTION_S=120. The upstream is a
local aiohttp app on loopback (allowlisted by CRANK_UPSTREAM_ALLOWLIST) that
counts requests per behaviour and ``Idempotency-Key``, can hold a request
until the test releases it, and answers per behaviour. Locks and records are
expired by updating their timestamps, never by sleeping.

Every test uses its own idempotency keys, so the counts of one test are its own.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import psycopg
import pytest
from aiohttp import web
from litestar import Litestar
from litestar.testing import AsyncTestClient

from mcp_gateway.pipeline.idempotency import IN_FLIGHT_RETRY_S, LOCK_MARGIN_S
from mcp_gateway.vocabulary.results import REPLAYED_META
from shared.db import connect
from tests.support.api import auth, grant_egress, make_token
from tests.support.db import database_url_for, reset_database
from tests.support.gateway import Gateway, run_gateway, wait_until
from tests.support.processes import free_port
from tests.support.tool_calls import (
    ERAS,
    Caller,
    assert_tool_error,
    ok,
    publish_agent,
    publish_operation,
)

PATH = "/mcp/v1/default/shop"
OTHER_PATH = "/mcp/v1/default/other-shop"
B_RETENTION_S = 120
BEHAVIOURS = ["ok", "hold", "slow-once", "status-409", "flaky-503", "status-503", "list", "nul"]


@dataclass
class Upstream:
    port: int = field(default_factory=free_port)
    hits: Counter[tuple[str, str]] = field(default_factory=Counter)  # (behaviour, key)
    requests: list[tuple[str, dict[str, str], bytes]] = field(default_factory=list)
    releases: dict[str, asyncio.Event] = field(default_factory=dict)

    def release(self, key: str) -> asyncio.Event:
        return self.releases.setdefault(key, asyncio.Event())

    async def handle(self, request: web.Request) -> web.Response:
        behaviour = request.match_info["behaviour"]
        key = request.headers.get("Idempotency-Key", "")
        self.hits[(behaviour, key)] += 1
        seen = self.hits[(behaviour, key)]
        self.requests.append((behaviour, dict(request.headers), await request.read()))
        if behaviour == "hold":
            await asyncio.wait_for(self.release(key).wait(), 20)
        elif behaviour == "slow-once" and seen == 1:
            await asyncio.sleep(2)  # past the operation's 300 ms timeout
        elif behaviour == "status-409":
            return web.json_response({"error": "conflict"}, status=409)
        elif behaviour == "status-503" or (behaviour == "flaky-503" and seen == 1):
            return web.json_response({"error": "maintenance"}, status=503)
        elif behaviour == "nul":  # PostgreSQL's jsonb cannot hold U+0000
            return web.json_response({"order_id": f"ord_{key}\u0000", "seen": seen})
        elif behaviour == "list":
            return web.json_response({"items": [{"n": n} for n in range(5)], "seen": seen})
        return web.json_response({"order_id": f"ord_{key}", "seen": seen})


def _op(name: str, url: str, **extra: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Creates one test order ({name}). Use when a test asks for it.",
        "input": {
            "type": "object",
            "properties": {
                "request_id": {
                    "type": "string",
                    "pattern": "^[a-z0-9-]{1,80}$",
                    "description": "Idempotency key of this order",
                },
                "behaviour": {"type": "string", "enum": BEHAVIOURS, "description": "What to do"},
                "amount": {"type": "integer", "description": "Amount in cents"},
            },
            "required": ["request_id", "behaviour", "amount"],
            "additionalProperties": False,
        },
        "request": {"method": "POST", "url": url, "body": "{amount: amount}"},
        "response": {"select": "{order_id: order_id, seen: seen}"},
        "execution_config": {
            "timeout_ms": 3000,
            "retries": 0,
            "idempotency": {"argument": "request_id", "header": "Idempotency-Key"},
        },
        **extra,
    }


def operations(port: int, closed: int, decoy: int) -> list[dict[str, Any]]:
    up = f"http://127.0.0.1:{port}"
    return [
        _op("create_order", f"{up}/orders/{{behaviour}}"),
        _op(
            "create_order_quick",
            f"{up}/orders/{{behaviour}}",
            execution_config={
                "timeout_ms": 300,
                "retries": 0,
                "idempotency": {"argument": "request_id", "header": "Idempotency-Key"},
            },
        ),
        _op(
            "create_order_retrying",
            f"{up}/orders/{{behaviour}}",
            execution_config={
                "timeout_ms": 3000,
                "retries": 2,
                "idempotency": {"argument": "request_id", "header": "Idempotency-Key"},
            },
        ),
        _op(
            "list_order_lines",
            f"{up}/orders/{{behaviour}}",
            response={"select": "items", "max_items": 2},
        ),
        _op("create_order_refused", f"http://127.0.0.1:{closed}/orders/{{behaviour}}"),
        _op("create_order_blocked", f"http://127.0.0.1:{decoy}/orders/{{behaviour}}"),
        {  # a POST without an idempotency key: never repeated
            **_op("create_note", f"{up}/orders/{{behaviour}}"),
            "execution_config": {"timeout_ms": 300, "retries": 2},
        },
    ]


@dataclass
class World:
    url: str
    a: Gateway
    b: Gateway
    upstream: Upstream
    key: str
    other_key: str
    http: httpx.AsyncClient

    def caller(self, gateway: Gateway | None = None, key: str | None = None) -> Caller:
        path = OTHER_PATH if key == self.other_key else PATH
        return Caller(self.http, (gateway or self.a).url + path, key or self.key)

    async def record(self, request_id: str) -> dict[str, Any] | None:
        async with await connect(self.url) as conn:
            cur = await conn.execute(
                """SELECT r.status, r.result, r.locked_until - now() AS locked_for,
                          r.expires_at - now() AS expires_in
                     FROM idempotency_records r JOIN agents a ON a.id = r.agent_id
                    WHERE a.slug = 'shop' AND r.key_hash = %s""",
                (key_hash(request_id),),
            )
            row = await cur.fetchone()
        return None if row is None else dict(row)

    async def execute(self, sql: str, request_id: str) -> None:
        async with await connect(self.url, autocommit=True) as conn:
            await conn.execute(sql + " WHERE key_hash = %s", (key_hash(request_id),))


def key_hash(request_id: str) -> bytes:
    return hashlib.sha256(request_id.encode()).digest()


@pytest.fixture(scope="module")
async def world(
    pg_server_url: str, run_database: str, app: Litestar, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    """The run's database used directly (as test_tool_errors.py here does):
    no test here may use the function-scoped ``database_url``."""
    url = database_url_for(pg_server_url, run_database)
    with psycopg.connect(url, autocommit=True) as conn:
        reset_database(conn, run_database)
    upstream = Upstream()
    closed, decoy = free_port(), free_port()
    server_app = web.Application()
    server_app.router.add_route("*", "/orders/{behaviour}", upstream.handle)
    runner = web.AppRunner(server_app, access_log=None, handler_cancellation=True)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", upstream.port).start()

    admin = await make_token(url, "admin")
    specs = operations(upstream.port, closed, decoy)
    async with AsyncTestClient(app=app) as client:
        await ok(
            await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=auth(admin))
        )
        await grant_egress(
            client, admin, "default", f"127.0.0.1:{upstream.port}", f"127.0.0.1:{closed}"
        )
        for spec in specs:
            await publish_operation(client, admin, spec)
        key = await publish_agent(client, admin, "shop", [s["name"] for s in specs])
        other_key = await publish_agent(client, admin, "other-shop", ["create_order"])

    env = {
        "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream.port},127.0.0.1:{closed}",
        "CRANK_RATE_LIMIT": "off",
        "CRANK_CALL_LOG_FLUSH_MS": "200",
    }
    b_env = env | {"CRANK_IDEMPOTENCY_RETENTION_S": str(B_RETENTION_S)}
    tmp = tmp_path_factory.mktemp("idempotency")
    try:
        async with (
            run_gateway(url, tmp, extra_env=env) as a,
            run_gateway(url, tmp, extra_env=b_env) as b,
            httpx.AsyncClient(timeout=30) as http,
        ):
            yield World(url, a, b, upstream, key, other_key, http)
    finally:
        for event in upstream.releases.values():
            event.set()
        await runner.cleanup()


def order(request_id: str, behaviour: str = "ok", amount: int = 1200) -> dict[str, Any]:
    return {"request_id": request_id, "behaviour": behaviour, "amount": amount}


def assert_fresh(result: dict[str, Any], request_id: str, seen: int = 1) -> None:
    assert result["isError"] is False, result
    assert result["structuredContent"] == {"order_id": f"ord_{request_id}", "seen": seen}
    assert REPLAYED_META not in result.get("_meta", {})


def assert_replayed(result: dict[str, Any], request_id: str, seen: int = 1) -> None:
    assert result["isError"] is False, result
    assert result["structuredContent"] == {"order_id": f"ord_{request_id}", "seen": seen}
    assert result["_meta"][REPLAYED_META] is True


async def test_the_key_travels_in_its_header_and_not_in_the_body(world: World) -> None:
    assert_fresh(await world.caller().call("legacy", "create_order", order("header")), "header")
    _behaviour, headers, body = world.upstream.requests[-1]
    assert headers["Idempotency-Key"] == "header"
    assert body == b'{"amount":1200}'


@pytest.mark.parametrize("era", ERAS)
async def test_a_retry_with_the_same_arguments_replays_the_stored_result(
    world: World, era: str
) -> None:
    rid = f"replay-{era}"
    assert_fresh(await world.caller().call(era, "create_order", order(rid)), rid)
    # Key order and number spelling do not matter (RFC 8785), nor the replica.
    same = {"amount": 1200.0, "behaviour": "ok", "request_id": rid}
    for gateway in (world.a, world.b):
        assert_replayed(await world.caller(gateway).call(era, "create_order", same), rid)
    assert world.upstream.hits[("ok", rid)] == 1
    record = await world.record(rid)
    assert record is not None
    assert record["status"] == "completed"


async def test_the_same_key_with_other_arguments_is_a_conflict(world: World) -> None:
    caller = world.caller()
    assert_fresh(await caller.call("legacy", "create_order", order("conflict")), "conflict")
    for era in ERAS:
        result = await caller.call(era, "create_order", order("conflict", amount=999))
        error = assert_tool_error(result, "idempotency_conflict")
        # Recoverable with a new key; the same call never succeeds, so no retry_after_s.
        assert error["recoverable"] is True
        assert "retry_after_s" not in error
    assert world.upstream.hits[("ok", "conflict")] == 1


async def test_a_retry_while_the_first_call_runs_is_in_progress_on_any_replica(
    world: World,
) -> None:
    rid = "in-flight"
    first = asyncio.create_task(
        world.caller(world.a).call("legacy", "create_order", order(rid, "hold"))
    )

    async def arrived() -> bool:
        return world.upstream.hits[("hold", rid)] == 1

    await wait_until(arrived)
    for gateway in (world.a, world.b):
        retry = await world.caller(gateway).call("modern", "create_order", order(rid, "hold"))
        error = assert_tool_error(retry, "idempotency_in_progress")
        assert 1 <= error["retry_after_s"] <= IN_FLIGHT_RETRY_S
    # Other arguments while it runs: a conflict, not a wait.
    other = await world.caller().call("legacy", "create_order", order(rid, "hold", amount=1))
    assert_tool_error(other, "idempotency_conflict")

    world.upstream.release(rid).set()
    done = await asyncio.wait_for(first, 20)
    assert done["structuredContent"] == {"order_id": f"ord_{rid}", "seen": 1}
    assert_replayed(
        await world.caller(world.b).call("legacy", "create_order", order(rid, "hold")), rid
    )
    assert world.upstream.hits[("hold", rid)] == 1


async def test_concurrent_identical_calls_on_two_replicas_go_upstream_once(world: World) -> None:
    rid = "stampede"
    calls = [
        world.caller(gateway).call(era, "create_order", order(rid, "hold"))
        for gateway in (world.a, world.b)
        for era in ERAS
        for _ in range(2)
    ]
    tasks = [asyncio.create_task(c) for c in calls]

    async def arrived() -> bool:
        return world.upstream.hits[("hold", rid)] >= 1

    await wait_until(arrived)

    async def all_but_one_answered() -> bool:
        return sum(task.done() for task in tasks) == len(tasks) - 1

    await wait_until(all_but_one_answered)  # while the first call is held upstream
    world.upstream.release(rid).set()
    results = await asyncio.wait_for(asyncio.gather(*tasks), 20)
    assert world.upstream.hits[("hold", rid)] == 1
    fresh = [r for r in results if not r["isError"] and REPLAYED_META not in r.get("_meta", {})]
    assert len(fresh) == 1
    for r in results:
        if r["isError"]:
            assert_tool_error(r, "idempotency_in_progress")
        else:
            assert r["structuredContent"] == {"order_id": f"ord_{rid}", "seen": 1}


async def test_an_unknown_outcome_keeps_the_key_locked_until_the_lock_expires(
    world: World,
) -> None:
    rid = "unknown"
    caller = world.caller()
    timed_out = await caller.call("legacy", "create_order_quick", order(rid, "slow-once"))
    assert_tool_error(timed_out, "upstream_timeout")
    record = await world.record(rid)
    assert record is not None
    assert record["status"] == "unknown"
    assert record["locked_for"].total_seconds() > LOCK_MARGIN_S - 5

    locked = await caller.call("legacy", "create_order_quick", order(rid, "slow-once"))
    error = assert_tool_error(locked, "idempotency_in_progress")
    assert LOCK_MARGIN_S - 5 <= error["retry_after_s"] <= LOCK_MARGIN_S + 1
    assert world.upstream.hits[("slow-once", rid)] == 1

    await world.execute(
        "UPDATE idempotency_records SET locked_until = now() - interval '1 second'", rid
    )
    again = await caller.call("modern", "create_order_quick", order(rid, "slow-once"))
    assert_fresh(again, rid, seen=2)  # upstream again, with the same key in the header
    assert [h["Idempotency-Key"] for b, h, _ in world.upstream.requests if b == "slow-once"] == [
        rid,
        rid,
    ]
    assert_replayed(
        await caller.call("legacy", "create_order_quick", order(rid, "slow-once")), rid, seen=2
    )
    assert world.upstream.hits[("slow-once", rid)] == 2


async def test_after_the_lock_expires_other_arguments_still_conflict(world: World) -> None:
    rid = "unknown-other"
    caller = world.caller()
    assert_tool_error(
        await caller.call("legacy", "create_order_quick", order(rid, "slow-once")),
        "upstream_timeout",
    )
    await world.execute(
        "UPDATE idempotency_records SET locked_until = now() - interval '1 second'", rid
    )
    other = await caller.call("legacy", "create_order_quick", order(rid, "slow-once", amount=5))
    assert_tool_error(other, "idempotency_conflict")
    assert world.upstream.hits[("slow-once", rid)] == 1


async def test_a_stale_call_cannot_overwrite_a_reclaimed_record(world: World) -> None:
    """The first call's lock is expired while it still runs; a retry claims the
    key and goes upstream. The first call finishes later: its result is not
    stored over the claim that owns the key now."""
    rid = "stale"
    caller = world.caller()
    first = asyncio.create_task(caller.call("legacy", "create_order", order(rid, "hold")))

    async def arrived(count: int) -> bool:
        return world.upstream.hits[("hold", rid)] == count

    await wait_until(lambda: arrived(1))
    await world.execute(
        "UPDATE idempotency_records SET locked_until = now() - interval '1 second'", rid
    )
    first_held = world.upstream.releases.pop(rid)  # the second request waits on a new event
    second = asyncio.create_task(
        world.caller(world.b).call("legacy", "create_order", order(rid, "hold"))
    )
    await wait_until(lambda: arrived(2))

    first_held.set()
    assert_fresh(await asyncio.wait_for(first, 20), rid, seen=1)  # the model still gets it
    record = await world.record(rid)
    assert record is not None
    assert record["status"] == "in_progress"

    world.upstream.release(rid).set()
    assert_fresh(await asyncio.wait_for(second, 20), rid, seen=2)
    assert_replayed(await caller.call("modern", "create_order", order(rid, "hold")), rid, seen=2)
    assert world.upstream.hits[("hold", rid)] == 2


async def test_a_non_recoverable_upstream_error_is_stored_and_replayed(world: World) -> None:
    rid = "refused-409"
    caller = world.caller()
    first = await caller.call("legacy", "create_order", order(rid, "status-409"))
    assert_tool_error(first, "upstream_conflict")
    assert REPLAYED_META not in first.get("_meta", {})
    for era in ERAS:
        again = await caller.call(era, "create_order", order(rid, "status-409"))
        error = assert_tool_error(again, "upstream_conflict")
        assert again["_meta"][REPLAYED_META] is True
        assert error["message"] == first["structuredContent"]["message"]
        assert error["request_id"] != first["structuredContent"]["request_id"]
    assert world.upstream.hits[("status-409", rid)] == 1


async def test_an_answer_holding_a_nul_is_stored_and_replayed_never_sent_again(
    world: World,
) -> None:
    first = await world.caller().call("legacy", "create_order", order("nul", "nul"))
    assert first["structuredContent"] == {"order_id": "ord_nul\u0000", "seen": 1}
    replay = await world.caller(world.b).call("legacy", "create_order", order("nul", "nul"))
    # Stored with U+FFFD in the NUL's place (docs/architecture.md, "Argument numbers").
    assert replay["structuredContent"] == {"order_id": "ord_nul\ufffd", "seen": 1}
    assert replay["_meta"][REPLAYED_META] is True
    assert world.upstream.hits[("nul", "nul")] == 1


async def test_a_recoverable_upstream_error_releases_the_key(world: World) -> None:
    rid = "flaky"
    caller = world.caller()
    assert_tool_error(
        await caller.call("legacy", "create_order", order(rid, "flaky-503")),
        "upstream_unavailable",
    )
    assert await world.record(rid) is None
    assert_fresh(await caller.call("legacy", "create_order", order(rid, "flaky-503")), rid, seen=2)
    assert_replayed(
        await caller.call("modern", "create_order", order(rid, "flaky-503")), rid, seen=2
    )
    assert world.upstream.hits[("flaky-503", rid)] == 2


@pytest.mark.parametrize(
    ("tool", "code"),
    [
        ("create_order_refused", "upstream_unavailable"),
        ("create_order_blocked", "upstream_blocked"),
    ],
)
async def test_a_call_that_never_reached_the_upstream_releases_the_key(
    world: World, tool: str, code: str
) -> None:
    rid = f"never-{tool.rsplit('_', 1)[1]}"
    for _ in range(2):  # the retry is not locked out
        assert_tool_error(await world.caller().call("legacy", tool, order(rid)), code)
        assert await world.record(rid) is None


async def test_idempotency_keys_are_per_agent(world: World) -> None:
    rid = "per-agent"
    assert_fresh(await world.caller().call("legacy", "create_order", order(rid)), rid)
    other = await world.caller(key=world.other_key).call("legacy", "create_order", order(rid))
    assert_fresh(other, rid, seen=2)
    assert world.upstream.hits[("ok", rid)] == 2


async def test_a_replay_fits_each_protocol_era_and_keeps_its_markers(world: World) -> None:
    rid = "eras"
    caller = world.caller()
    first = await caller.call("legacy", "list_order_lines", order(rid, "list"))
    assert first["structuredContent"] == {"items": [{"n": 0}, {"n": 1}]}
    assert first["_meta"] == {"crank/truncated": True}
    modern = await caller.call("modern", "list_order_lines", order(rid, "list"))
    assert modern["structuredContent"] == [{"n": 0}, {"n": 1}]
    assert modern["_meta"] == {"crank/truncated": True, REPLAYED_META: True}
    legacy = await caller.call("legacy", "list_order_lines", order(rid, "list"))
    assert legacy["structuredContent"] == {"items": [{"n": 0}, {"n": 1}]}
    assert world.upstream.hits[("list", rid)] == 1


async def test_an_expired_record_is_forgotten(world: World) -> None:
    rid = "expired"
    caller = world.caller()
    assert_fresh(await caller.call("legacy", "create_order", order(rid)), rid)
    await world.execute(
        "UPDATE idempotency_records SET expires_at = now() - interval '1 second'", rid
    )
    # Forgotten: other arguments are no conflict, and the call goes upstream again.
    assert_fresh(await caller.call("legacy", "create_order", order(rid, amount=7)), rid, seen=2)
    assert world.upstream.hits[("ok", rid)] == 2


async def test_records_expire_after_the_configured_retention(world: World) -> None:
    for gateway, retention_s in ((world.a, 86400), (world.b, B_RETENTION_S)):
        rid = f"retention-{gateway.port}"
        assert_fresh(await world.caller(gateway).call("legacy", "create_order", order(rid)), rid)
        record = await world.record(rid)
        assert record is not None
        assert record["locked_for"] is None
        assert retention_s - 30 <= record["expires_in"].total_seconds() <= retention_s


async def test_a_post_without_an_idempotency_key_is_never_repeated(world: World) -> None:
    """The executor repeats a POST only when it carries its idempotency key:
    the keyless one is sent once, the keyed one up to retries + 1 times."""
    caller = world.caller()
    assert_tool_error(
        await caller.call("legacy", "create_note", order("note-503", "status-503")),
        "upstream_unavailable",
    )
    assert_tool_error(
        await caller.call("legacy", "create_note", order("note-slow", "slow-once")),
        "upstream_timeout",
    )
    assert world.upstream.hits[("status-503", "")] == 1  # no Idempotency-Key header at all
    assert world.upstream.hits[("slow-once", "")] == 1
    assert_tool_error(
        await caller.call("legacy", "create_order_retrying", order("keyed-503", "status-503")),
        "upstream_unavailable",
    )
    assert world.upstream.hits[("status-503", "keyed-503")] == 3


async def test_the_call_log_records_the_idempotency_outcomes(world: World) -> None:
    rid = "logged"
    caller = world.caller()
    assert_fresh(await caller.call("legacy", "create_order", order(rid)), rid)
    assert_replayed(await caller.call("legacy", "create_order", order(rid)), rid)
    assert_tool_error(
        await caller.call("legacy", "create_order", order(rid, amount=1)), "idempotency_conflict"
    )

    async def written() -> bool:
        async with await connect(world.url) as conn:
            cur = await conn.execute(
                """SELECT outcome, attempts, upstream_ms FROM call_log
                    WHERE tool = 'create_order' ORDER BY called_at DESC, id DESC LIMIT 3"""
            )
            rows = [dict(row) for row in await cur.fetchall()]
        return [r["outcome"] for r in reversed(rows)] == ["ok", "ok", "idempotency_conflict"] and (
            rows[1]["upstream_ms"] is None and rows[1]["attempts"] == 0  # the replay
        )

    await wait_until(written, timeout_s=10)
