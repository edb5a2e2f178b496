"""Hostile input on the approval paths, through a real gateway, a real Postgres
and a real loopback upstream (docs/security.md, "MCP and approval endpoints"):

- a NUL in an approval id, a decision note or a list cursor, and an id or
  cursor of the wrong shape, get the documented 4xx with a ``{code, message}``
  body, never a 500;
- a NUL in an approval-gated argument is ``invalid_arguments`` naming it;
- another agent's approval key can neither read, decide nor expire this
  agent's approval;
- integers beyond 2**53 hash exactly (approval and DELETE confirmation) and
  reach the upstream exactly;
- a NUL in an upstream's answer to an approved call is recorded (as U+FFFD),
  so the call is not sent again;
- a whole-number float (1e20) sends the same body upstream whether the call
  runs directly or after approval (docs/architecture.md, "Argument numbers").
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web

from shared.crypto import b64url_encode
from shared.db import connect
from tests.support.api import Client, auth, grant_egress
from tests.support.approvals import behind_the_trigger, new_key, status_is
from tests.support.gateway import Gateway, run_gateway, serve_upstream, wait_until
from tests.support.mcp import bearer
from tests.support.processes import free_port
from tests.support.tool_calls import (
    Caller,
    assert_tool_error,
    confirmed,
    ok,
    publish_agent,
    publish_operation,
    token_of,
)

MCP = "/mcp/v1/default/sales"
APPROVALS = "/v1/default/sales/approvals"
OTHER_APPROVALS = "/v1/default/other/approvals"
BEYOND_DOUBLES = 2**53 + 1  # the first integer a double cannot hold


def payment_spec(port: int, name: str, *, approval: bool) -> dict[str, Any]:
    return {
        "name": name,
        "description": (
            "Records a payment received for an invoice. Use when the user reports a payment. "
            "Returns the payment id."
        ),
        "input": {
            "type": "object",
            "properties": {
                "reference": {"type": "string", "description": "Payment reference, e.g. r-1"},
                "amount": {"type": "number", "description": "Amount in cents"},
            },
            "required": ["reference", "amount"],
            "additionalProperties": False,
        },
        "request": {"method": "POST", "url": f"http://127.0.0.1:{port}/payments"},
        "response": {"select": "{id: id}"},
        "execution_config": {"timeout_ms": 5000, "retries": 0},
        "safety": {"approval": approval},
    }


def delete_spec(port: int) -> dict[str, Any]:
    return {
        "name": "delete_payment",
        "description": (
            "Deletes a recorded payment. Use when the user says a payment was recorded by "
            "mistake. Returns the deleted id."
        ),
        "input": {
            "type": "object",
            "properties": {"payment_id": {"type": "integer", "description": "Payment id"}},
            "required": ["payment_id"],
            "additionalProperties": False,
        },
        "request": {"method": "DELETE", "url": f"http://127.0.0.1:{port}/payments/{{payment_id}}"},
        "response": {"select": "{id: id}"},
        "execution_config": {"timeout_ms": 5000, "retries": 0},
    }


@dataclass
class Ledger:
    """The upstream: records the raw bytes of every request it receives."""

    port: int = field(default_factory=free_port)
    seen: list[tuple[str, str, bytes]] = field(default_factory=list)  # method, path, body
    answer_id: str | None = None  # the id to answer instead of pay-<n>

    async def receive(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.raw_path, await request.read()))
        return web.json_response({"id": self.answer_id or f"pay-{len(self.seen)}"})


@pytest.fixture
async def ledger() -> AsyncIterator[Ledger]:
    state = Ledger()
    app = web.Application()
    app.router.add_post("/payments", state.receive)
    app.router.add_delete("/payments/{id}", state.receive)
    async with serve_upstream(app, state.port):
        yield state


@dataclass
class Keys:
    agent: str  # sales
    approval: str  # sales, kind approval
    other_agent: str  # other (the same approval-gated operation)
    other_approval: str  # other, kind approval


@pytest.fixture
async def keys(client: Client, admin_token: str, ledger: Ledger) -> Keys:
    h = auth(admin_token)
    await ok(await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=h))
    await publish_operation(
        client, admin_token, payment_spec(ledger.port, "record_payment", approval=True)
    )
    await publish_operation(
        client, admin_token, payment_spec(ledger.port, "record_payment_now", approval=False)
    )
    await publish_operation(client, admin_token, delete_spec(ledger.port))
    operations = ["record_payment", "record_payment_now", "delete_payment"]
    await grant_egress(client, admin_token, "default", f"127.0.0.1:{ledger.port}")
    return Keys(
        agent=await publish_agent(client, admin_token, "sales", operations),
        approval=await new_key(client, admin_token, "sales", "approval"),
        other_agent=await publish_agent(client, admin_token, "other", ["record_payment"]),
        other_approval=await new_key(client, admin_token, "other", "approval"),
    )


@pytest.fixture
async def gateway(
    database_url: str, tmp_path: Path, ledger: Ledger, keys: Keys
) -> AsyncIterator[Gateway]:
    env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{ledger.port}", "CRANK_RATE_LIMIT": "off"}
    async with run_gateway(database_url, tmp_path, extra_env=env) as running:
        yield running


async def ask_approval(caller: Caller, arguments: dict[str, Any]) -> str:
    result = await caller.call("modern", "record_payment", arguments)
    assert result["isError"] is False, result
    assert result["structuredContent"]["status"] == "approval_required"
    return str(result["structuredContent"]["approval_id"])


async def approve(http: httpx.AsyncClient, key: str, approval_id: str) -> None:
    answer = await http.post(
        f"{APPROVALS}/{approval_id}/approve", json={"approve": "yes"}, headers=bearer(key)
    )
    assert answer.status_code == 200, answer.text


def refused(answer: httpx.Response, status: int, code: str) -> str:
    """The message of a documented ``{code, message}`` refusal."""
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["code"] == code, body
    return str(body["message"])


def cursor_of(created_at: str, approval_id: str) -> str:
    return b64url_encode(json.dumps([created_at, approval_id]).encode())


def assert_no_crash(gateway: Gateway) -> None:
    log = gateway.log()
    assert "approvals_endpoint_failed" not in log
    assert "tool_call_crashed" not in log
    assert "Traceback" not in log


# --- NUL and malformed values on the approval-key endpoints -------------------------------------


async def test_a_nul_or_malformed_approval_id_is_404_before_any_query(
    http: httpx.AsyncClient, keys: Keys, gateway: Gateway
) -> None:
    approval_id = await ask_approval(Caller(http, MCP, keys.agent), {"reference": "r", "amount": 1})
    key = bearer(keys.approval)
    for bad in ("approval_%00", approval_id[:-1] + "%00", approval_id.upper(), "x" * 2000):
        refused(await http.get(f"{APPROVALS}/{bad}", headers=key), 404, "not_found")
        for action, body in (("approve", {"approve": "yes"}), ("deny", {"approve": "no"})):
            answer = await http.post(f"{APPROVALS}/{bad}/{action}", json=body, headers=key)
            refused(answer, 404, "not_found")
    # A bad body still comes first, as documented (the body, then the row).
    answer = await http.post(f"{APPROVALS}/approval_%00/approve", json={}, headers=key)
    refused(answer, 400, "bad_request")
    record = await http.get(f"{APPROVALS}/{approval_id}", headers=key)
    assert record.json()["status"] == "pending"
    assert_no_crash(gateway)


async def test_a_nul_or_an_overlong_note_is_a_400_naming_note(
    http: httpx.AsyncClient, keys: Keys, gateway: Gateway
) -> None:
    approval_id = await ask_approval(Caller(http, MCP, keys.agent), {"reference": "r", "amount": 2})
    key = bearer(keys.approval)
    for note in ("ok\x00then", "\x00", "n" * 2001):
        for action, verdict in (("approve", "yes"), ("deny", "no")):
            answer = await http.post(
                f"{APPROVALS}/{approval_id}/{action}",
                json={"approve": verdict, "note": note},
                headers=key,
            )
            assert "$.note" in refused(answer, 400, "bad_request")
    record = (await http.get(f"{APPROVALS}/{approval_id}", headers=key)).json()
    assert (record["status"], record["note"]) == ("pending", None)
    # Control characters other than NUL are text a person may write; the note is kept.
    note = "line one\nline two\ttabbed"
    answer = await http.post(
        f"{APPROVALS}/{approval_id}/deny", json={"approve": "no", "note": note}, headers=key
    )
    assert answer.json()["note"] == note
    assert_no_crash(gateway)


async def test_a_nul_or_malformed_cursor_is_a_400(
    http: httpx.AsyncClient, keys: Keys, gateway: Gateway
) -> None:
    caller = Caller(http, MCP, keys.agent)
    for n in range(3):
        await ask_approval(caller, {"reference": f"r-{n}", "amount": n + 1})
    key = bearer(keys.approval)
    first = await http.get(APPROVALS, params={"limit": "1"}, headers=key)
    good = first.json()["next_cursor"]
    assert good is not None
    now = datetime.now(UTC).isoformat()
    bad_cursors = [
        "\x00",
        good + "\x00",
        cursor_of(now, "approval_\x00"),  # the id part with a NUL
        cursor_of(now, "approval_" + "0" * 31 + "\x00"),
        cursor_of(now, "not an id"),
        cursor_of(now.removesuffix("+00:00"), "approval_" + "0" * 32),  # no time zone
        cursor_of("not a time", "approval_" + "0" * 32),
        b64url_encode(b"\x00\x00\x00"),
        "%",
    ]
    for cursor in bad_cursors:
        answer = await http.get(APPROVALS, params={"cursor": cursor}, headers=key)
        assert "cursor" in refused(answer, 400, "bad_request"), cursor
    nul_status = await http.get(APPROVALS, params={"status": "pending\x00"}, headers=key)
    refused(nul_status, 400, "bad_request")
    # The cursor the endpoint gave still pages on.
    second = await http.get(APPROVALS, params={"limit": "1", "cursor": good}, headers=key)
    assert second.status_code == 200, second.text
    assert len(second.json()["items"]) == 1
    assert_no_crash(gateway)


async def test_a_nul_in_an_approval_gated_argument_is_invalid_arguments_naming_it(
    http: httpx.AsyncClient, keys: Keys, gateway: Gateway, database_url: str
) -> None:
    caller = Caller(http, MCP, keys.agent)
    result = await caller.call("modern", "record_payment", {"reference": "a\x00b", "amount": 1})
    error = assert_tool_error(result, "invalid_arguments")
    assert "$.reference" in error["message"]
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT count(*) AS n FROM approvals")
        assert await cur.fetchone() == {"n": 0}
    # The same value on a call that stores nothing goes upstream, JSON-escaped.
    direct = await caller.call("modern", "record_payment_now", {"reference": "a\x00b", "amount": 1})
    assert direct["isError"] is False, direct
    assert_no_crash(gateway)


async def test_a_nul_in_the_upstreams_answer_is_recorded_and_the_call_not_repeated(
    http: httpx.AsyncClient, keys: Keys, ledger: Ledger, database_url: str, gateway: Gateway
) -> None:
    ledger.answer_id = "pay\x00-1"  # jsonb cannot hold U+0000
    approval_id = await ask_approval(Caller(http, MCP, keys.agent), {"reference": "r", "amount": 3})
    await approve(http, keys.approval, approval_id)
    await wait_until(lambda: status_is(database_url, approval_id, "completed"))
    record = (await http.get(f"{APPROVALS}/{approval_id}", headers=bearer(keys.approval))).json()
    assert (record["response_payload"], record["arguments"]) == (
        {"id": "pay\ufffd-1"},
        {"reference": "r", "amount": 3},
    )
    assert len(ledger.seen) == 1
    assert "approval_result_lost" not in gateway.log()
    assert_no_crash(gateway)


# --- agent scoping --------------------------------------------------------------------------------


async def test_another_agents_approval_key_cannot_read_decide_or_expire_this_agents_approval(
    http: httpx.AsyncClient, keys: Keys, database_url: str
) -> None:
    mine = await ask_approval(Caller(http, MCP, keys.agent), {"reference": "r", "amount": 5})
    async with await connect(database_url, autocommit=True) as conn:
        await behind_the_trigger(
            conn,
            "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = %s",
            (mine,),
        )
    # The other agent's approval key, on its own agent's paths, asks for this agent's row:
    # every path that would expire an overdue row it meets (read, decide, list).
    theirs = bearer(keys.other_approval)
    refused(await http.get(f"{OTHER_APPROVALS}/{mine}", headers=theirs), 404, "not_found")
    for action, verdict in (("approve", "yes"), ("deny", "no")):
        answer = await http.post(
            f"{OTHER_APPROVALS}/{mine}/{action}", json={"approve": verdict}, headers=theirs
        )
        refused(answer, 404, "not_found")
    listed = await http.get(OTHER_APPROVALS, headers=theirs)
    assert listed.json()["items"] == []
    # ... and on this agent's paths it is refused outright.
    refused(await http.get(f"{APPROVALS}/{mine}", headers=theirs), 403, "forbidden")
    assert await status_is(database_url, mine, "pending")  # overdue, but nobody of sales met it
    # This agent's own key meets it and expires it.
    record = await http.get(f"{APPROVALS}/{mine}", headers=bearer(keys.approval))
    assert record.json()["status"] == "expired"


# --- numbers --------------------------------------------------------------------------------------


async def test_an_integer_beyond_doubles_is_approved_and_sent_exactly(
    http: httpx.AsyncClient, keys: Keys, ledger: Ledger, database_url: str, gateway: Gateway
) -> None:
    caller = Caller(http, MCP, keys.agent)
    arguments = {"reference": "big", "amount": BEYOND_DOUBLES}
    approval_id = await ask_approval(caller, arguments)
    # The hash is exact: the same call finds the same row, the neighbour a new one.
    assert await ask_approval(caller, arguments) == approval_id
    assert await ask_approval(caller, {**arguments, "amount": BEYOND_DOUBLES - 1}) != approval_id
    record = await http.get(f"{APPROVALS}/{approval_id}", headers=bearer(keys.approval))
    assert record.json()["arguments"]["amount"] == BEYOND_DOUBLES
    await approve(http, keys.approval, approval_id)
    await wait_until(lambda: status_is(database_url, approval_id, "completed"))
    [(method, path, body)] = ledger.seen
    assert (method, path) == ("POST", "/payments")
    assert body == b'{"amount":9007199254740993,"reference":"big"}'
    assert_no_crash(gateway)


async def test_an_integer_beyond_doubles_gets_a_delete_confirmation_that_works(
    http: httpx.AsyncClient, keys: Keys, ledger: Ledger, gateway: Gateway
) -> None:
    caller = Caller(http, MCP, keys.agent)
    arguments = {"payment_id": BEYOND_DOUBLES}
    token = token_of(await caller.call("modern", "delete_payment", arguments))
    # The token is bound to the exact integer: one less is another call.
    neighbour = await caller.call("modern", "delete_payment", {"payment_id": BEYOND_DOUBLES - 1})
    assert token_of(neighbour) != token
    wrong = await caller.call(
        "modern", "delete_payment", confirmed({"payment_id": BEYOND_DOUBLES - 1}, token)
    )
    assert_tool_error(wrong, "confirmation_invalid")
    assert ledger.seen == []
    done = await caller.call("modern", "delete_payment", confirmed(arguments, token))
    assert done["isError"] is False, done
    assert ledger.seen == [("DELETE", "/payments/9007199254740993", b"")]
    assert_no_crash(gateway)


async def test_a_whole_float_sends_the_same_body_directly_and_after_approval(
    http: httpx.AsyncClient, keys: Keys, ledger: Ledger, database_url: str, gateway: Gateway
) -> None:
    caller = Caller(http, MCP, keys.agent)
    # httpx writes 1e20 as the JSON text 1e+20: a float on the wire, as a client sends it.
    arguments = {"reference": "float", "amount": 1e20}
    direct = await caller.call("modern", "record_payment_now", arguments)
    assert direct["isError"] is False, direct
    approval_id = await ask_approval(caller, arguments)
    # The integer spelling of the same number is the same call.
    assert await ask_approval(caller, {**arguments, "amount": 10**20}) == approval_id
    await approve(http, keys.approval, approval_id)
    await wait_until(lambda: status_is(database_url, approval_id, "completed"))
    record = (await http.get(f"{APPROVALS}/{approval_id}", headers=bearer(keys.approval))).json()
    assert record["response_payload"] == {"id": "pay-2"}
    [(_, _, sent_directly), (_, _, sent_after_approval)] = ledger.seen
    assert (
        sent_directly
        == sent_after_approval
        == (b'{"amount":100000000000000000000,"reference":"float"}')
    )
    assert_no_crash(gateway)
