"""Human approval through real gateway processes: the gate of tools/call (the
seed's ``approval_required`` structure, one active row per call also under
concurrency across replicas, expiry) and the approval-key endpoints (auth,
list, read, approve, deny, errors, CORS, the audit log).

The operation under test is a refund (POST) with upstream auth from a
workspace secret, on a loopback upstream that records every request: the
gate must never reach it. The worker that executes approved rows is another
module's (mcp_gateway.approvals.worker); the end-to-end test at the bottom
drives the seed's curl sequence through it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from shared.db import connect
from shared.engine.canonical import arguments_hash
from shared.engine.masking import MASK
from shared.keys import display_prefix
from tests.support.api import Client, auth, grant_egress
from tests.support.approvals import behind_the_trigger, new_key
from tests.support.gateway import Gateway, demo_gateway, run_gateway, serve_upstream, wait_until
from tests.support.mcp import curl_client
from tests.support.processes import free_port
from tests.support.tool_calls import (
    BASE,
    ERAS,
    Caller,
    legacy_headers,
    ok,
    open_session,
    publish_agent,
    publish_operation,
    rpc,
)

MCP = "/mcp/v1/default/sales"
APPROVALS = "/v1/default/sales/approvals"
SECRET = "upstream-token-4f9a2c"
ARGS = {"order_id": "ord_456", "amount": 1200, "reason": "requested_by_customer"}
RECORD_FIELDS = {
    "id",
    "status",
    "tool",
    "version",
    "arguments",
    "created_at",
    "expires_at",
    "decided_at",
    "decided_by",
    "note",
    "completed_at",
    "response_payload",
    "recent_identical",
    "requester",
}


def refund_spec(port: int) -> dict[str, Any]:
    return {
        "name": "create_refund",
        "title": "Refund an order",
        "description": (
            "Refunds part or all of a paid order. Use when the user asks to give money back "
            "for an order. Returns the refund id and amount."
        ),
        "input": {
            "type": "object",
            "properties": {
                "order_id": {"type": "string", "pattern": "^ord_[0-9]+$", "description": "Order"},
                "amount": {"type": "integer", "minimum": 1, "description": "Cents"},
                "reason": {
                    "type": "string",
                    "enum": ["requested_by_customer", "duplicate"],
                    "description": "Why",
                },
            },
            "required": ["order_id", "amount", "reason"],
            "additionalProperties": False,
        },
        "request": {
            "method": "POST",
            "url": f"http://127.0.0.1:{port}/refunds",
            "auth": {"type": "bearer", "secret": "SALES_TOKEN"},
        },
        "response": {
            "select": "{refund_id: id, amount: amount}",
            "output_schema": {
                "type": "object",
                "properties": {"refund_id": {"type": "string"}, "amount": {"type": "integer"}},
            },
        },
        "execution_config": {"timeout_ms": 10000, "retries": 0},
        "safety": {"approval": True},
    }


class Upstream:
    """The refund API: records every request; the approval gate must send none."""

    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[tuple[str, str, dict[str, Any]]] = []
        self.hold: asyncio.Event | None = None  # set: answers wait until it is set

    async def refund(self, request: web.Request) -> web.Response:
        body = await request.json()
        self.seen.append((request.method, request.headers.get("Authorization", ""), body))
        if self.hold is not None:
            await asyncio.wait_for(self.hold.wait(), 10)
        return web.json_response({"id": f"re_{len(self.seen)}", "amount": body["amount"]})


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    state = Upstream()
    app = web.Application()
    app.router.add_post("/refunds", state.refund)
    async with serve_upstream(app, state.port):
        yield state


@dataclass
class Sales:
    admin: str
    agent_key: str  # sales
    approval_key: str  # sales, kind approval
    other_key: str  # agent "other" (same operation)
    other_approval_key: str  # "other", kind approval
    draft_approval_key: str  # "draft": an agent that is not published


@pytest.fixture
async def sales(client: Client, admin_token: str, upstream: Upstream) -> Sales:
    h = auth(admin_token)
    await ok(await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=h))
    await grant_egress(client, admin_token, "default", f"127.0.0.1:{upstream.port}")
    await ok(await client.put(f"{BASE}/secrets/SALES_TOKEN", json={"value": SECRET}, headers=h))
    await publish_operation(client, admin_token, refund_spec(upstream.port))
    agent_key = await publish_agent(client, admin_token, "sales", ["create_refund"])
    other_key = await publish_agent(client, admin_token, "other", ["create_refund"])
    draft = {"slug": "draft", "operations": ["create_refund"]}
    await ok(await client.post(f"{BASE}/agents", json=draft, headers=h))
    return Sales(
        admin=admin_token,
        agent_key=agent_key,
        approval_key=await new_key(client, admin_token, "sales", "approval"),
        other_key=other_key,
        other_approval_key=await new_key(client, admin_token, "other", "approval"),
        draft_approval_key=await new_key(client, admin_token, "draft", "approval"),
    )


def gateway_env(upstream: Upstream, **extra: str) -> dict[str, str]:
    return {
        "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream.port}",
        "CRANK_CALL_LOG_FLUSH_MS": "100",
        **extra,
    }


@pytest.fixture
async def gateway(
    database_url: str, tmp_path: Path, upstream: Upstream, sales: Sales
) -> AsyncIterator[Gateway]:
    env = gateway_env(upstream, CRANK_ALLOWED_ORIGINS="https://approve.example.com")
    async with run_gateway(database_url, tmp_path, extra_env=env) as running:
        yield running


def bearer(key: str, **extra: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", **extra}


def expected_structure(approval_id: str, prefix: str = "") -> dict[str, Any]:
    url = f"{prefix}/v1/default/sales/approvals/{approval_id}"
    return {
        "status": "approval_required",
        "approval_id": approval_id,
        "approval_url": url,
        "approve": {"method": "POST", "url": f"{url}/approve", "body": {"approve": "yes"}},
        "deny": {"method": "POST", "url": f"{url}/deny", "body": {"approve": "no"}},
    }


async def request_approval(caller: Caller, era: str = "legacy", args: Any = None) -> str:
    """tools/call of the refund; the approval id of its approval_required answer."""
    result = await caller.call(era, "create_refund", ARGS if args is None else args)
    assert result["isError"] is False, result
    structured: dict[str, Any] = result["structuredContent"]
    assert structured["status"] == "approval_required"
    return str(structured["approval_id"])


async def rows(database_url: str) -> list[dict[str, Any]]:
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT * FROM approvals ORDER BY created_at, id")
        return await cur.fetchall()


async def status_of(database_url: str, approval_id: str, expected: str) -> bool:
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT status FROM approvals WHERE id = %s", (approval_id,))
        return await cur.fetchone() == {"status": expected}


async def get_record(http: httpx.AsyncClient, key: str, approval_id: str) -> dict[str, Any]:
    response = await http.get(f"{APPROVALS}/{approval_id}", headers=bearer(key))
    assert response.status_code == 200, response.text
    record: dict[str, Any] = response.json()
    return record


async def decide(
    http: httpx.AsyncClient, key: str, approval_id: str, action: str, body: Any
) -> httpx.Response:
    return await http.post(f"{APPROVALS}/{approval_id}/{action}", json=body, headers=bearer(key))


# --- the gate of tools/call ------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_the_first_call_stores_a_pending_approval_and_answers_the_seed_structure(
    era: str,
    http: httpx.AsyncClient,
    sales: Sales,
    upstream: Upstream,
    database_url: str,
    client: Client,
) -> None:
    caller = Caller(http, MCP, sales.agent_key)
    result = await caller.call(era, "create_refund", ARGS)

    assert result["isError"] is False
    [row] = await rows(database_url)
    assert result["structuredContent"] == expected_structure(row["id"])
    assert row["id"].startswith("approval_")
    assert upstream.seen == []  # nothing went upstream
    assert row["status"] == "pending"
    assert (row["tool"], row["version"], row["arguments"]) == ("create_refund", 1, ARGS)
    assert bytes(row["arguments_hash"]) == arguments_hash(ARGS)
    assert row["max_attempts"] == 3
    assert row["attempt"] == 0
    assert row["lease_owner"] is None
    assert row["response_payload"] is None
    # The fully resolved request, with the upstream secret masked.
    request = row["request"]
    assert (request["method"], request["url"]) == (
        "POST",
        f"http://127.0.0.1:{upstream.port}/refunds",
    )
    assert json.loads(request["body"]) == ARGS
    assert SECRET not in json.dumps(request)
    assert ["Authorization", f"Bearer {MASK}"] in request["headers"]
    ttl = (row["expires_at"] - row["created_at"]).total_seconds()
    assert 86390 < ttl <= 86400  # CRANK_APPROVAL_TTL_S default

    async def logged() -> list[dict[str, Any]]:
        calls = await client.get(
            f"{BASE}/calls?outcome=approval_required", headers=auth(sales.admin)
        )
        items: list[dict[str, Any]] = calls.json()["items"]
        return items

    await wait_until(logged)
    [entry] = await logged()
    assert (entry["tool"], entry["upstream_status"], entry["attempts"]) == (
        "create_refund",
        None,
        0,
    )


async def test_an_operation_that_needs_approval_publishes_no_output_schema(
    http: httpx.AsyncClient, sales: Sales
) -> None:
    session = await open_session(http, MCP, sales.agent_key)
    listed = await http.post(
        MCP, json=rpc("tools/list", {}), headers=legacy_headers(sales.agent_key, session)
    )
    [tool] = listed.json()["result"]["tools"]
    assert tool["name"] == "create_refund"
    assert "outputSchema" not in tool


async def test_a_repeat_with_the_same_canonical_arguments_returns_the_active_approval(
    http: httpx.AsyncClient, sales: Sales, database_url: str, upstream: Upstream
) -> None:
    caller = Caller(http, MCP, sales.agent_key)
    first = await request_approval(caller)
    # Key order, the era and the number spelling (1200.0) do not matter (RFC 8785).
    reordered = {"reason": "requested_by_customer", "amount": 1200.0, "order_id": "ord_456"}
    assert await request_approval(caller, "modern", reordered) == first
    assert await request_approval(caller, "legacy") == first
    # Other arguments, or the same ones from another agent: another approval.
    other_args = await request_approval(caller, args={**ARGS, "amount": 1300})
    other_agent = await request_approval(
        Caller(http, MCP.replace("sales", "other"), sales.other_key)
    )
    assert len({first, other_args, other_agent}) == 3
    assert len(await rows(database_url)) == 3

    # Approved and executing rows stay active: while the worker holds the
    # approved call at the upstream, a repeat still answers its approval ...
    upstream.hold = asyncio.Event()
    approved = await decide(http, sales.approval_key, first, "approve", {"approve": "yes"})
    assert approved.status_code == 200, approved.text
    assert await request_approval(caller) == first  # approved or executing by now
    await wait_until(lambda: status_of(database_url, first, "executing"))
    assert await request_approval(caller) == first
    upstream.hold.set()
    # ... a finished one does not: the next repeat gets its outcome once
    # (test_outcome_delivery.py), and the one after that asks anew.
    await wait_until(lambda: status_of(database_url, first, "completed"))
    assert len(upstream.seen) == 1
    outcome = await caller.call("legacy", "create_refund", ARGS)
    assert outcome["_meta"]["crank/approval_id"] == first
    completed_again = await request_approval(caller)
    denied = await decide(http, sales.approval_key, other_args, "deny", {"approve": "no"})
    assert denied.status_code == 200, denied.text
    outcome = await caller.call("legacy", "create_refund", {**ARGS, "amount": 1300})
    assert outcome["structuredContent"]["error_code"] == "approval_denied"
    denied_again = await request_approval(caller, args={**ARGS, "amount": 1300})
    assert len({first, other_args, other_agent, completed_again, denied_again}) == 5


async def test_twenty_concurrent_identical_calls_across_two_gateways_make_one_row(
    database_url: str, tmp_path: Path, upstream: Upstream, sales: Sales
) -> None:
    env = gateway_env(upstream, CRANK_RATE_LIMIT="off")
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as first,
        run_gateway(database_url, tmp_path, extra_env=env) as second,
        httpx.AsyncClient(timeout=30) as http,
    ):
        # Modern-era calls: stateless, so every one is a fresh request on either replica.
        callers = [Caller(http, f"{gw.url}{MCP}", sales.agent_key) for gw in (first, second)]
        results = await asyncio.gather(
            *(request_approval(callers[n % 2], "modern") for n in range(20))
        )
    found = await rows(database_url)
    assert len(found) == 1
    assert set(results) == {found[0]["id"]}
    assert upstream.seen == []


async def test_returned_urls_carry_the_public_path_prefix_and_work(
    database_url: str, tmp_path: Path, upstream: Upstream, sales: Sales
) -> None:
    env = gateway_env(upstream, CRANK_PUBLIC_PATH_PREFIX="/mcp/")
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=20) as http,
    ):
        result = await Caller(http, MCP, sales.agent_key).call("modern", "create_refund", ARGS)
        structured = result["structuredContent"]
        assert structured == expected_structure(structured["approval_id"], prefix="/mcp")
        # The gateway answers on /mcp/v1/... as on /v1/...
        read = await http.get(structured["approval_url"], headers=bearer(sales.approval_key))
        assert read.json()["status"] == "pending"
        approve = structured["approve"]
        decided = await http.request(
            approve["method"],
            approve["url"],
            json=approve["body"],
            headers=bearer(sales.approval_key),
        )
        assert decided.json()["status"] == "approved"


async def test_pending_approvals_expire_and_a_repeat_call_asks_anew(
    http: httpx.AsyncClient, sales: Sales, database_url: str
) -> None:
    caller = Caller(http, MCP, sales.agent_key)
    first = await request_approval(caller)
    late = await request_approval(caller, args={**ARGS, "amount": 99})
    async with await connect(database_url, autocommit=True) as conn:
        await behind_the_trigger(
            conn,
            "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id IN (%s, %s)",
            (first, late),
        )
    # Read: expired, undecided.
    record = await get_record(http, sales.approval_key, first)
    assert (record["status"], record["decided_at"], record["decided_by"]) == ("expired", None, None)
    # A decision on a row past its time: 409, expired, nothing recorded.
    approve = await decide(http, sales.approval_key, late, "approve", {"approve": "yes"})
    assert approve.status_code == 409
    assert approve.json()["code"] == "not_pending"
    assert approve.json()["status"] == "expired"
    assert (await get_record(http, sales.approval_key, late))["decided_at"] is None
    # The same call again gets the outcome once (approval_expired), then a new approval.
    expired = await caller.call("legacy", "create_refund", ARGS)
    assert expired["structuredContent"]["error_code"] == "approval_expired"
    again = await request_approval(caller)
    assert again != first
    assert (await get_record(http, sales.approval_key, again))["status"] == "pending"
    statuses = sorted(r["status"] for r in await rows(database_url))
    assert statuses == ["expired", "expired", "pending"]


async def test_a_repeat_call_expires_an_overdue_active_approval_it_meets(
    http: httpx.AsyncClient, sales: Sales, database_url: str
) -> None:
    caller = Caller(http, MCP, sales.agent_key)
    first = await request_approval(caller)
    async with await connect(database_url, autocommit=True) as conn:
        await behind_the_trigger(
            conn,
            "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = %s",
            (first,),
        )
    # No read in between: the call itself expires it, and answers that outcome.
    expired = await caller.call("legacy", "create_refund", ARGS)
    assert expired["structuredContent"]["error_code"] == "approval_expired"
    assert expired["_meta"]["crank/approval_id"] == first
    second = await request_approval(caller)
    assert second != first
    assert [r["status"] for r in await rows(database_url)] == ["expired", "pending"]


# --- the approval-key endpoints ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("case", "status"),
    [
        ("no key", 401),
        ("malformed key", 401),
        ("unknown key", 401),
        ("unknown agent", 404),
        ("unpublished agent", 404),
        ("agent key", 403),
        ("other agent's approval key", 403),
    ],
)
async def test_the_approvals_endpoints_take_only_this_agents_approval_key(
    case: str, status: int, http: httpx.AsyncClient, sales: Sales
) -> None:
    approval_id = await request_approval(Caller(http, MCP, sales.agent_key))
    path, key = APPROVALS, sales.approval_key
    if case == "unknown agent":
        path = "/v1/default/nobody/approvals"
    elif case == "unpublished agent":
        path, key = "/v1/default/draft/approvals", sales.draft_approval_key
    keys = {
        "malformed key": "not-a-key",
        "unknown key": sales.approval_key[:-8] + "AAAAAAAA",
        "agent key": sales.agent_key,
        "other agent's approval key": sales.other_approval_key,
    }
    key = keys.get(case, key)
    headers = {} if case == "no key" else bearer(key)
    answers = [
        await http.get(path, headers=headers),
        await http.get(f"{path}/{approval_id}", headers=headers),
        await http.post(f"{path}/{approval_id}/approve", json={"approve": "yes"}, headers=headers),
        await http.post(f"{path}/{approval_id}/deny", json={"approve": "no"}, headers=headers),
    ]
    assert [a.status_code for a in answers] == [status] * 4
    expected_code = {401: "unauthorized", 403: "forbidden", 404: "not_found"}[status]
    assert {a.json()["code"] for a in answers} == {expected_code}
    if status == 401:
        assert all(a.headers["www-authenticate"] == "Bearer" for a in answers)
    assert (await get_record(http, sales.approval_key, approval_id))["status"] == "pending"


async def test_an_approval_key_is_refused_on_every_mcp_method(
    http: httpx.AsyncClient, sales: Sales, upstream: Upstream
) -> None:
    session = await open_session(http, MCP, sales.agent_key)
    for method, params in (
        ("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}),
        ("tools/list", {}),
        ("tools/call", {"name": "create_refund", "arguments": ARGS}),
    ):
        headers = legacy_headers(sales.approval_key, None if method == "initialize" else session)
        answer = await http.post(MCP, json=rpc(method, params), headers=headers)
        assert answer.status_code == 403, (method, answer.text)
    assert upstream.seen == []


async def test_a_record_shows_what_design_lists_and_only_to_its_agent(
    http: httpx.AsyncClient, sales: Sales
) -> None:
    approval_id = await request_approval(Caller(http, MCP, sales.agent_key))
    for path in (f"/v1/default/sales/approvals/{approval_id}", f"/mcp{APPROVALS}/{approval_id}"):
        read = await http.get(path, headers=bearer(sales.approval_key))
        assert read.status_code == 200
        assert read.headers["content-type"] == "application/json"
        record = read.json()
        assert set(record) == RECORD_FIELDS
        assert record["id"] == approval_id
        assert (record["status"], record["tool"], record["version"]) == (
            "pending",
            "create_refund",
            1,
        )
        assert record["arguments"] == ARGS
        assert record["created_at"] < record["expires_at"]
        for field in ("decided_at", "decided_by", "note", "completed_at", "response_payload"):
            assert record[field] is None
        # Who asked: the agent key, by the prefix the console lists it with.
        assert record["requester"] == {"key": display_prefix(sales.agent_key)}

    unknown = await http.get(f"{APPROVALS}/approval_nope", headers=bearer(sales.approval_key))
    assert (unknown.status_code, unknown.json()["code"]) == (404, "not_found")
    # Another agent's approval is as unknown to this agent's key as a missing one.
    other_path = "/v1/default/other/approvals"
    theirs = await request_approval(Caller(http, MCP.replace("sales", "other"), sales.other_key))
    foreign = await http.get(f"{APPROVALS}/{theirs}", headers=bearer(sales.approval_key))
    assert (foreign.status_code, foreign.json()["code"]) == (404, "not_found")
    mine = await http.get(f"{other_path}/{theirs}", headers=bearer(sales.other_approval_key))
    assert mine.status_code == 200


async def test_the_list_is_newest_first_with_cursor_paging_and_a_status_filter(
    http: httpx.AsyncClient, sales: Sales
) -> None:
    caller = Caller(http, MCP, sales.agent_key)
    ids = [await request_approval(caller, args={**ARGS, "amount": n}) for n in range(1, 6)]
    theirs = await request_approval(Caller(http, MCP.replace("sales", "other"), sales.other_key))
    denied = await decide(http, sales.approval_key, ids[1], "deny", {"approve": "no"})
    assert denied.status_code == 200
    key = bearer(sales.approval_key)

    everything = (await http.get(APPROVALS, headers=key)).json()
    assert set(everything) == {"items", "next_cursor"}
    assert [r["id"] for r in everything["items"]] == ids[::-1]  # not the other agent's
    assert theirs not in [r["id"] for r in everything["items"]]
    assert everything["next_cursor"] is None
    assert all(set(r) == RECORD_FIELDS for r in everything["items"])

    seen: list[str] = []
    cursor: str | None = None
    while True:
        params = {"limit": "2", **({"cursor": cursor} if cursor else {})}
        page = (await http.get(APPROVALS, params=params, headers=key)).json()
        assert len(page["items"]) <= 2
        seen += [r["id"] for r in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == ids[::-1]

    pending = (await http.get(APPROVALS, params={"status": "pending"}, headers=key)).json()
    assert [r["id"] for r in pending["items"]] == [i for i in ids[::-1] if i != ids[1]]
    only_denied = (await http.get(APPROVALS, params={"status": "denied"}, headers=key)).json()
    assert [r["id"] for r in only_denied["items"]] == [ids[1]]
    none = (await http.get(APPROVALS, params={"status": "completed"}, headers=key)).json()
    assert none == {"items": [], "next_cursor": None}

    for params in ({"status": "active"}, {"cursor": "garbage"}, {"limit": "0"}, {"limit": "x"}):
        bad = await http.get(APPROVALS, params=params, headers=key)
        assert (bad.status_code, bad.json()["code"]) == (400, "bad_request"), params


@pytest.mark.parametrize(("action", "status"), [("approve", "approved"), ("deny", "denied")])
async def test_a_decision_answers_the_record_and_is_in_the_audit_log(
    action: str,
    status: str,
    http: httpx.AsyncClient,
    sales: Sales,
    client: Client,
    upstream: Upstream,
) -> None:
    approval_id = await request_approval(Caller(http, MCP, sales.agent_key))
    body = {"approve": "yes" if action == "approve" else "no", "note": "Checked with Anna"}
    answer = await decide(http, sales.approval_key, approval_id, action, body)
    assert answer.status_code == 200, answer.text
    record = answer.json()
    assert set(record) == RECORD_FIELDS
    assert record["id"] == approval_id
    assert record["status"] == status
    assert record["decided_by"] == display_prefix(sales.approval_key)
    assert record["note"] == "Checked with Anna"
    assert record["decided_at"] is not None
    if action == "deny":
        assert upstream.seen == []

    audit = (await client.get(f"{BASE}/audit", headers=auth(sales.admin))).json()["items"][0]
    assert audit["action"] == f"approval.{status}"
    assert audit["actor"] == f"approval key {display_prefix(sales.approval_key)}…"
    assert (audit["resource_type"], audit["resource_name"]) == ("approval", approval_id)
    assert audit["details"] == {
        "note": "Checked with Anna",
        "tool": "create_refund",
        "version": 1,
        "agent": "default/sales",
        "requester": {"key_id": audit_key_id(audit)},
    }


def audit_key_id(audit: dict[str, Any]) -> int:
    """The id the decision's audit names as the requester: an agent key's (an int)."""
    key_id = audit["details"]["requester"]["key_id"]
    assert isinstance(key_id, int)
    return key_id


async def test_the_note_is_optional(http: httpx.AsyncClient, sales: Sales) -> None:
    approval_id = await request_approval(Caller(http, MCP, sales.agent_key))
    answer = await decide(http, sales.approval_key, approval_id, "deny", {"approve": "no"})
    assert answer.status_code == 200, answer.text
    assert (answer.json()["status"], answer.json()["note"]) == ("denied", None)


@pytest.mark.parametrize(
    ("action", "body"),
    [
        ("approve", {"approve": "no"}),
        ("deny", {"approve": "yes"}),
        ("approve", {"approve": "YES"}),
        ("approve", {"approve": True}),
        ("approve", {}),
        ("approve", {"approve": "yes", "note": 5}),
        ("approve", {"approve": "yes", "reason": "unknown fields are refused"}),
        ("approve", {"approve": "yes", "note": "x" * 2001}),
        ("approve", ["yes"]),
        ("approve", b"{not json"),
        ("approve", b""),
    ],
)
async def test_a_mismatching_decision_body_is_400_and_changes_nothing(
    action: str, body: Any, http: httpx.AsyncClient, sales: Sales, client: Client
) -> None:
    approval_id = await request_approval(Caller(http, MCP, sales.agent_key))
    url = f"{APPROVALS}/{approval_id}/{action}"
    headers = bearer(sales.approval_key, **{"Content-Type": "application/json"})
    if isinstance(body, bytes):
        answer = await http.post(url, content=body, headers=headers)
    else:
        answer = await http.post(url, json=body, headers=headers)
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "bad_request"
    assert answer.json()["message"]
    record = await get_record(http, sales.approval_key, approval_id)
    assert (record["status"], record["decided_at"]) == ("pending", None)
    audit = (await client.get(f"{BASE}/audit", headers=auth(sales.admin))).json()["items"]
    assert not [e for e in audit if e["resource_type"] == "approval"]


async def test_a_decision_on_a_row_that_is_not_pending_is_409_and_changes_nothing(
    http: httpx.AsyncClient, sales: Sales, client: Client
) -> None:
    approval_id = await request_approval(Caller(http, MCP, sales.agent_key))
    first = await decide(http, sales.approval_key, approval_id, "deny", {"approve": "no"})
    assert first.status_code == 200
    for action, body in (("approve", {"approve": "yes"}), ("deny", {"approve": "no", "note": "x"})):
        again = await decide(http, sales.approval_key, approval_id, action, body)
        assert again.status_code == 409
        assert again.json()["code"] == "not_pending"
        assert again.json()["status"] == "denied"
    assert await get_record(http, sales.approval_key, approval_id) == first.json()
    audit = (await client.get(f"{BASE}/audit", headers=auth(sales.admin))).json()["items"]
    assert len([e for e in audit if e["resource_type"] == "approval"]) == 1


async def test_a_decision_on_an_unknown_or_another_agents_approval_is_404(
    http: httpx.AsyncClient, sales: Sales
) -> None:
    theirs = await request_approval(Caller(http, MCP.replace("sales", "other"), sales.other_key))
    for approval_id in ("approval_nope", theirs):
        answer = await decide(http, sales.approval_key, approval_id, "approve", {"approve": "yes"})
        assert (answer.status_code, answer.json()["code"]) == (404, "not_found")
    read = await http.get(
        f"/v1/default/other/approvals/{theirs}", headers=bearer(sales.other_approval_key)
    )
    assert read.json()["status"] == "pending"


async def test_wrong_methods_and_media_types_are_refused(
    http: httpx.AsyncClient, sales: Sales
) -> None:
    approval_id = await request_approval(Caller(http, MCP, sales.agent_key))
    key = bearer(sales.approval_key)
    for method, path in (
        ("POST", APPROVALS),
        ("DELETE", f"{APPROVALS}/{approval_id}"),
        ("GET", f"{APPROVALS}/{approval_id}/approve"),
    ):
        answer = await http.request(method, path, headers=key)
        assert answer.status_code == 405, (method, path)
        assert answer.json()["code"] == "method_not_allowed"
        assert "OPTIONS" in answer.headers["allow"]
    form = await http.post(
        f"{APPROVALS}/{approval_id}/approve",
        content=b"approve=yes",
        headers={**key, "Content-Type": "application/x-www-form-urlencoded"},
    )
    assert form.status_code == 415
    assert (await http.get("/v1/default/sales/approvals/x/y", headers=key)).status_code == 404


async def test_cors_for_the_allowed_origins_and_403_for_others(
    http: httpx.AsyncClient, sales: Sales
) -> None:
    approval_id = await request_approval(Caller(http, MCP, sales.agent_key))
    origin = {"Origin": "https://approve.example.com"}
    preflight = await http.options(
        f"{APPROVALS}/{approval_id}/approve",
        headers={
            **origin,
            "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": "authorization, content-type",
        },
    )
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "https://approve.example.com"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    allowed_headers = preflight.headers["access-control-allow-headers"].lower()
    assert {"authorization", "content-type"} <= {h.strip() for h in allowed_headers.split(",")}
    assert "origin" in preflight.headers["vary"].lower()

    listed = await http.get(APPROVALS, headers=bearer(sales.approval_key, **origin))
    assert listed.status_code == 200
    assert listed.headers["access-control-allow-origin"] == "https://approve.example.com"
    # Errors carry the header too, so the browser app can read them.
    refused = await http.get(APPROVALS, headers=origin)
    assert refused.status_code == 401
    assert refused.headers["access-control-allow-origin"] == "https://approve.example.com"
    # No Origin (curl, servers): no CORS header at all.
    plain = await http.get(APPROVALS, headers=bearer(sales.approval_key))
    assert "access-control-allow-origin" not in plain.headers

    evil = {"Origin": "https://evil.example.net"}
    for answer in (
        await http.options(APPROVALS, headers={**evil, "Access-Control-Request-Method": "GET"}),
        await http.get(APPROVALS, headers=bearer(sales.approval_key, **evil)),
        await http.post(
            f"{APPROVALS}/{approval_id}/approve",
            json={"approve": "yes"},
            headers=bearer(sales.approval_key, **evil),
        ),
    ):
        assert answer.status_code == 403
        assert answer.json()["code"] == "forbidden"
        assert "access-control-allow-origin" not in answer.headers
    assert (await get_record(http, sales.approval_key, approval_id))["status"] == "pending"


# --- end to end: the seed's curl sequence, completed by the worker -----------------------------

# The seed's --data string of the approve line, byte for byte.
SEED_APPROVE = '{ "approve": "yes", "note": "Пользователь подтвердил действие" }'.encode()


async def test_the_seed_curl_sequence_approves_and_the_worker_completes_the_refund(
    database_url: str, tmp_path: Path
) -> None:
    """The demo (``crank up``'s): tools/call of sales_create_refund → list approvals →
    approve with the seed's body → GET shows ``completed`` with ``response_payload``."""
    arguments = {
        "request_id": "refund-ord_456-001",
        "order_id": "ord_456",
        "amount_minor_units": 1200,
        "currency": "EUR",
        "reason": "requested_by_customer",
    }
    async with (
        demo_gateway(database_url, tmp_path) as demo,
        httpx.AsyncClient(base_url=demo.gateway.url, timeout=20) as mcp_http,
        curl_client(demo.gateway.url) as curl,
    ):
        approval_key = demo.approval_key
        result = await Caller(mcp_http, MCP, demo.agent_key).call(
            "legacy", "sales_create_refund", arguments
        )
        structured = result["structuredContent"]
        approval_id = structured["approval_id"]
        assert structured == expected_structure(approval_id)

        # curl https://crank.example.com/mcp/v1/default/sales/approvals \
        #   -H 'Authorization: Bearer <approval_api_key>'
        listed = await curl.get("/mcp/v1/default/sales/approvals", headers=bearer(approval_key))
        assert listed.status_code == 200
        assert [r["id"] for r in listed.json()["items"]] == [approval_id]
        assert listed.json()["items"][0]["status"] == "pending"
        # What the approver reads says the unit and the currency (issue #27).
        shown = listed.json()["items"][0]["arguments"]
        assert (shown["amount_minor_units"], shown["currency"]) == (1200, "EUR")

        # curl .../approvals/<approval_id>/approve -H 'Authorization: Bearer <approval_api_key>' \
        #   -H 'Content-Type: application/json' --data '{ "approve": "yes", "note": "..." }'
        approved = await curl.post(
            f"/mcp/v1/default/sales/approvals/{approval_id}/approve",
            content=SEED_APPROVE,
            headers=bearer(approval_key, **{"Content-Type": "application/json"}),
        )
        assert approved.status_code == 200, approved.text
        assert approved.json()["note"] == "Пользователь подтвердил действие"

        # curl .../approvals/<approval_id> -H 'Authorization: Bearer <approval_api_key>'
        async def completed() -> bool:
            read = await curl.get(
                f"/mcp/v1/default/sales/approvals/{approval_id}", headers=bearer(approval_key)
            )
            return bool(read.json()["status"] in ("completed", "failed"))

        await wait_until(completed, timeout_s=30)
        record = (
            await curl.get(
                f"/mcp/v1/default/sales/approvals/{approval_id}", headers=bearer(approval_key)
            )
        ).json()
        assert record["status"] == "completed", record
        assert record["completed_at"] is not None
        payload = record["response_payload"]  # the operation's selection of the answer
        assert payload["refund_id"].startswith("re_")
        assert {k: v for k, v in payload.items() if k != "refund_id"} == {
            "order_id": "ord_456",
            "amount": 1200,
            "currency": "EUR",
            "status": "succeeded",
        }
        # The refund happened once, upstream.
        order = await mcp_http.get(f"http://127.0.0.1:{demo.sales_port}/orders/ord_456")
        assert order.json()["refunded_amount"] == 1200
