"""DELETE confirmation asked of the human (2026-07-28 elicitation) through real gateways.

Two gateway processes (A and B, one database) serve the module, as two
replicas do; the upstream is a local aiohttp app on loopback (granted to the
workspace) that counts every request. The official Python SDK (mcp 2.x) is the
client where it can be: its ``Client`` declares ``elicitation`` in every
request's ``_meta`` when an ``elicitation_callback`` is set and drives the
multi-round-trip loop itself (``InputRequiredResult`` → the callback → the
retry with ``inputResponses`` and the echoed ``requestState``). Replays,
altered states and the shapes on the wire are sent as raw HTTP, shaped as the
specification's schema says (``InputResponseRequestParams``: ``inputResponses``
and ``requestState`` beside ``name`` and ``arguments`` in ``params``).

Every test uses its own order ids, so the counts of one test are its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import httpx2
import mcp_types
import psycopg
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from mcp_gateway.transport.results import REQUEST_KEY
from shared.db import connect
from shared.engine.errors import suggested_action
from tests.support.api import auth, grant_egress, make_token
from tests.support.db import database_url_for, reset_database
from tests.support.gateway import Gateway, run_gateway, serve_upstream, wait_until
from tests.support.humans import Human
from tests.support.mcp import META, VERSION, modern
from tests.support.orders import OrdersUpstream, order_operations
from tests.support.tool_calls import (
    BASE,
    assert_tool_error,
    confirmed,
    ok,
    publish_agent,
    publish_operation,
    rpc,
    token_of,
)

PATH = "/mcp/v1/default/ops"
TOKEN_PATH = "/mcp/v1/default/ops-token"
SECRET = "elicitation-secret-value-0123456789"
B_TTL_S = 2  # gateway B's CRANK_ELICITATION_TTL_S, to see a state expire
ELICITING = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}


@dataclass
class World:
    url: str  # the database
    a: Gateway
    b: Gateway
    upstream: OrdersUpstream
    key: str  # agent ops (confirmation_mode auto)
    second_key: str  # another key of ops
    token_key: str  # agent ops-token (confirmation_mode token)
    admin: str
    http: httpx.AsyncClient

    def hits(self, order: str) -> int:
        return sum(n for hit, n in self.upstream.hits.items() if f"/{order}" in hit)

    async def post(
        self,
        params: dict[str, Any],
        *,
        meta: dict[str, Any] = ELICITING,
        key: str | None = None,
        gateway: Gateway | None = None,
        path: str = PATH,
        id_: int = 3,
    ) -> dict[str, Any]:
        """A raw 2026-07-28 tools/call; the JSON-RPC message of its HTTP 200 answer."""
        response = await self.http.post(
            (gateway or self.a).url + path,
            json=rpc("tools/call", {**params, "_meta": meta}, id_=id_),
            headers=modern(key or self.key, "tools/call", **{"Mcp-Name": params["name"]}),
        )
        assert response.status_code == 200, response.text
        assert "ct_" not in response.text or meta is not ELICITING or path == TOKEN_PATH
        message: dict[str, Any] = response.json()
        return message

    async def ask(self, tool: str, args: dict[str, Any], **kw: Any) -> dict[str, Any]:
        """The first call: the ``InputRequiredResult`` (asserted to be one)."""
        result = (await self.post({"name": tool, "arguments": args}, **kw))["result"]
        assert result["resultType"] == "input_required", result
        return dict(result)

    async def answer(
        self, tool: str, args: dict[str, Any], state: Any, action: str | None, **kw: Any
    ) -> dict[str, Any]:
        """The retry carrying the form's answer and the echoed state; its result."""
        params: dict[str, Any] = {"name": tool, "arguments": args, "requestState": state}
        if action is not None:
            params["inputResponses"] = {REQUEST_KEY: {"action": action}}
        message = await self.post(params, id_=4, **kw)
        assert "result" in message, message
        return dict(message["result"])


@pytest.fixture(scope="module")
async def world(
    pg_server_url: str, run_database: str, app: Litestar, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    """The run's database used directly (as test_confirmation.py here does)."""
    url = database_url_for(pg_server_url, run_database)
    with psycopg.connect(url, autocommit=True) as conn:
        reset_database(conn, run_database)
    upstream = OrdersUpstream()
    async with serve_upstream(upstream.app(), upstream.port) as port:
        specs = order_operations(port)
        # The form shows the title; the bearer secret is what a value must never show.
        specs[0] |= {
            "title": "Delete a test order",
            "request": specs[0]["request"] | {"auth": {"type": "bearer", "secret": "SHOP_TOKEN"}},
        }
        admin = await make_token(url, "admin")
        async with AsyncTestClient(app=app) as client:
            h = auth(admin)
            await ok(await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=h))
            await ok(
                await client.put(f"{BASE}/secrets/SHOP_TOKEN", json={"value": SECRET}, headers=h)
            )
            await grant_egress(client, admin, "default", f"127.0.0.1:{port}")
            for spec in specs:
                await publish_operation(client, admin, spec)
            key = await publish_agent(client, admin, "ops", [s["name"] for s in specs])
            created = await ok(await client.post(f"{BASE}/keys", json={"agent": "ops"}, headers=h))
            second_key = str(created.json()["key"])
            token_key = await _publish_token_agent(client, admin)

        env = {
            "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{port}",
            "CRANK_RATE_LIMIT": "off",
            "CRANK_ELICITATION_TTL_S": "120",
        }
        tmp = tmp_path_factory.mktemp("elicitation")
        async with (
            run_gateway(url, tmp, extra_env=env) as a,
            run_gateway(url, tmp, extra_env=env | {"CRANK_ELICITATION_TTL_S": str(B_TTL_S)}) as b,
            httpx.AsyncClient(timeout=30) as http,
        ):
            yield World(url, a, b, upstream, key, second_key, token_key, admin, http)


async def _publish_token_agent(client: Any, admin: str) -> str:
    """Agent ops-token, ``confirmation_mode: token``, created through the operation file
    (``apply``), which is also what ``crank apply`` sends."""
    document = {
        "agents": [
            {"slug": "ops-token", "operations": ["delete_order"], "confirmation_mode": "token"}
        ]
    }
    applied = await client.post(
        f"{BASE}/apply", params={"publish": "true"}, json=document, headers=auth(admin)
    )
    assert applied.status_code == 200, applied.text
    created = await ok(
        await client.post(f"{BASE}/keys", json={"agent": "ops-token"}, headers=auth(admin))
    )
    return str(created.json()["key"])


# -- the official SDK as the client ------------------------------------------------------


async def _sdk_call(
    world: World, human: Human | None, tool: str, args: dict[str, Any], key: str | None = None
) -> mcp_types.CallToolResult:
    path = TOKEN_PATH if key == world.token_key else PATH
    headers = {"Authorization": f"Bearer {key or world.key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(world.a.url + path, http_client=http)
        async with McpClient(transport, mode="auto", elicitation_callback=human) as client:
            assert client.protocol_version == VERSION
            return await client.call_tool(tool, args)


async def test_sdk_accept_runs_the_delete_once_after_the_human_saw_what_it_deletes(
    world: World,
) -> None:
    human = Human("accept")
    called = await _sdk_call(world, human, "delete_order", {"order_id": "sdk-accept"})
    assert called.is_error is False, called
    assert called.structured_content == {"order_id": "sdk-accept", "deleted": True}
    assert world.upstream.hits["DELETE /orders/sdk-accept"] == 1
    [form] = human.forms
    assert isinstance(form, mcp_types.ElicitRequestFormParams)
    # Plain words: the title, the author's description and the argument the model chose.
    assert "delete" in form.message
    assert "Delete a test order" in form.message
    assert "Changes one test order (delete_order)" in form.message
    assert 'order_id = "sdk-accept"' in form.message
    assert "ct_" not in form.message
    assert form.requested_schema["properties"] == {}


@pytest.mark.parametrize("action", ["decline", "cancel"])
async def test_sdk_decline_or_cancel_is_confirmation_declined_and_nothing_is_sent(
    world: World, action: str
) -> None:
    order = f"sdk-{action}"
    human = Human(action)
    called = await _sdk_call(world, human, "delete_order", {"order_id": order})
    assert called.is_error is True
    assert called.structured_content is not None
    assert called.structured_content["error_code"] == "confirmation_declined"
    assert called.structured_content["recoverable"] is False
    assert called.structured_content["suggested_action"] == suggested_action(
        "confirmation_declined"
    )
    assert len(human.forms) == 1
    assert world.hits(order) == 0


async def test_sdk_without_elicitation_keeps_the_token_flow(world: World) -> None:
    called = await _sdk_call(world, None, "delete_order", {"order_id": "sdk-no-elicitation"})
    assert called.structured_content is not None
    assert called.structured_content["error_code"] == "confirmation_required"
    assert "ct_" in called.structured_content["message"]
    assert world.hits("sdk-no-elicitation") == 0


async def test_sdk_agent_forcing_tokens_gets_a_token_despite_elicitation(world: World) -> None:
    human = Human("accept")
    called = await _sdk_call(
        world, human, "delete_order", {"order_id": "sdk-forced"}, key=world.token_key
    )
    assert called.structured_content is not None
    assert called.structured_content["error_code"] == "confirmation_required"
    assert "ct_" in called.structured_content["message"]
    assert human.forms == []
    assert world.hits("sdk-forced") == 0


# -- the wire, as the specification's schema shapes it ------------------------------------


async def test_the_input_required_result_has_the_specification_shape_and_no_token(
    world: World,
) -> None:
    args = {"order_id": "shape"}
    result = await world.ask("delete_order", args)
    assert set(result) == {"resultType", "inputRequests", "requestState"}
    assert list(result["inputRequests"]) == [REQUEST_KEY]
    form = result["inputRequests"][REQUEST_KEY]
    assert form["method"] == "elicitation/create"
    assert form["params"]["mode"] == "form"
    assert form["params"]["requestedSchema"] == {"type": "object", "properties": {}}
    assert isinstance(result["requestState"], str)
    assert not result["requestState"].startswith("ct_")
    # Validates against the SDK's 2026-07-28 wire model.
    mcp_types.InputRequiredResult.model_validate(result)
    assert world.hits("shape") == 0


async def test_a_token_the_model_brings_is_ignored_for_an_eliciting_client(world: World) -> None:
    """A ct_ token got through a client without elicitation does not let the model
    confirm by itself: the eliciting client's call still asks the human."""
    args = {"order_id": "brought-token"}
    plain = {**META}
    first = await world.post({"name": "delete_order", "arguments": args}, meta=plain)
    token = token_of(first["result"])
    asked = await world.ask("delete_order", confirmed(args, token))
    assert asked["resultType"] == "input_required"
    assert world.hits("brought-token") == 0


async def test_accept_runs_once_and_a_replayed_state_is_refused_on_every_replica(
    world: World,
) -> None:
    args = {"order_id": "replay"}
    state = (await world.ask("delete_order", args))["requestState"]
    done = await world.answer("delete_order", args, state, "accept")
    assert done["isError"] is False, done
    assert done["resultType"] == "complete"
    assert world.upstream.hits["DELETE /orders/replay"] == 1
    for gateway in (world.a, world.b):
        again = await world.answer("delete_order", args, state, "accept", gateway=gateway)
        error = assert_tool_error(again, "confirmation_invalid")
        assert error["suggested_action"] == suggested_action("confirmation_invalid")
    assert world.upstream.hits["DELETE /orders/replay"] == 1


async def test_a_state_issued_on_one_replica_works_once_on_the_other(world: World) -> None:
    args = {"order_id": "two-replicas"}
    state = (await world.ask("delete_order", args, gateway=world.a))["requestState"]
    done = await world.answer("delete_order", args, state, "accept", gateway=world.b)
    assert done["isError"] is False, done
    assert_tool_error(
        await world.answer("delete_order", args, state, "accept", gateway=world.a),
        "confirmation_invalid",
    )
    assert world.upstream.hits["DELETE /orders/two-replicas"] == 1


async def test_an_expired_state_is_refused(world: World) -> None:
    """Expiry is inside the signed state, set by the replica that asked (B: 2 s);
    any replica refuses it after that."""
    args = {"order_id": "expired"}
    state = (await world.ask("delete_order", args, gateway=world.b))["requestState"]
    await asyncio.sleep(B_TTL_S + 0.5)
    assert_tool_error(
        await world.answer("delete_order", args, state, "accept"), "confirmation_invalid"
    )
    assert world.hits("expired") == 0


async def test_a_declined_state_cannot_be_accepted_afterwards(world: World) -> None:
    args = {"order_id": "declined-then-accepted"}
    state = (await world.ask("delete_order", args))["requestState"]
    assert_tool_error(
        await world.answer("delete_order", args, state, "decline"), "confirmation_declined"
    )
    assert_tool_error(
        await world.answer("delete_order", args, state, "accept"), "confirmation_invalid"
    )
    assert world.hits("declined-then-accepted") == 0


@pytest.mark.parametrize("change", ["arguments", "tool", "key", "agent", "bytes", "not a string"])
async def test_an_altered_or_foreign_state_is_refused_and_stays_usable(
    world: World, change: str
) -> None:
    """Refused before it is marked used: the call it was issued for still runs after."""
    order = f"altered-{change}".replace(" ", "-")
    args = {"order_id": order}
    state = (await world.ask("delete_order", args))["requestState"]
    tool, used_args, used_state, kw = "delete_order", args, state, {}
    if change == "arguments":
        used_args = {"order_id": f"{order}-other"}
    elif change == "tool":
        tool = "archive_order"
    elif change == "key":
        kw = {"key": world.second_key}
    elif change == "agent":
        kw = {"key": world.token_key, "path": TOKEN_PATH}
    elif change == "bytes":
        used_state = state[:-3] + ("AAA" if not state.endswith("AAA") else "BBB")
    else:
        used_state = {"state": state}
    refused = await world.answer(tool, used_args, used_state, "accept", **kw)
    if change == "agent":  # that agent forces tokens: no human is asked, a ct_ token is
        token_of(refused)
    else:
        assert_tool_error(refused, "confirmation_invalid")
    assert world.hits(order) == 0
    done = await world.answer("delete_order", args, state, "accept")
    assert done["isError"] is False, done
    assert world.upstream.hits[f"DELETE /orders/{order}"] == 1


async def test_a_retry_without_an_answer_asks_again(world: World) -> None:
    args = {"order_id": "no-answer"}
    state = (await world.ask("delete_order", args))["requestState"]
    again = await world.answer("delete_order", args, state, None)
    assert again["resultType"] == "input_required"
    assert again["requestState"] != state
    # The first state was used up by that retry; the new one works.
    assert_tool_error(
        await world.answer("delete_order", args, state, "accept"), "confirmation_invalid"
    )
    done = await world.answer("delete_order", args, again["requestState"], "accept")
    assert done["isError"] is False, done
    assert world.upstream.hits["DELETE /orders/no-answer"] == 1


@pytest.mark.parametrize(
    "responses",
    [["accept"], {REQUEST_KEY: "accept"}, {REQUEST_KEY: {"action": "yes"}}],
    ids=["not-an-object", "not-a-result", "unknown-action"],
)
async def test_malformed_input_responses_are_invalid_params(world: World, responses: Any) -> None:
    args = {"order_id": "malformed"}
    state = (await world.ask("delete_order", args))["requestState"]
    params = {
        "name": "delete_order",
        "arguments": args,
        "requestState": state,
        "inputResponses": responses,
    }
    message = await world.post(params, id_=9)
    assert message["id"] == 9
    assert message["error"]["code"] == -32602
    assert world.hits("malformed") == 0


async def test_a_non_delete_confirmation_says_run_not_delete(world: World) -> None:
    form = (await world.ask("archive_order", {"order_id": "archive"}))["inputRequests"]
    message = form[REQUEST_KEY]["params"]["message"]
    assert "run an operation" in message
    assert "archive_order" in message


async def test_argument_values_in_the_form_are_masked_and_quoted(world: World) -> None:
    """A secret the model put in an argument is masked; a newline stays ``\\n``, so
    a value cannot write lines of the form. The pattern refuses such ids, so the
    form is read through one that passes: the secret's own characters fit it."""
    args = {"order_id": SECRET}
    result = await world.ask("delete_order", args)
    message = result["inputRequests"][REQUEST_KEY]["params"]["message"]
    assert SECRET not in message
    assert "order_id = " in message


@pytest.mark.parametrize(
    "capabilities",
    [{}, {"elicitation": {"url": {}}}, {"sampling": {}}, {"elicitation": True}],
    ids=["none", "url-only", "sampling", "not-an-object"],
)
async def test_a_client_without_form_elicitation_gets_the_token_flow(
    world: World, capabilities: dict[str, Any]
) -> None:
    meta = {**META, "io.modelcontextprotocol/clientCapabilities": capabilities}
    message = await world.post(
        {"name": "delete_order", "arguments": {"order_id": "no-form"}}, meta=meta
    )
    token_of(message["result"])
    assert world.hits("no-form") == 0


async def test_an_empty_elicitation_capability_means_form(world: World) -> None:
    meta = {**META, "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
    result = (
        await world.post({"name": "delete_order", "arguments": {"order_id": "empty"}}, meta=meta)
    )["result"]
    assert result["resultType"] == "input_required"


async def test_a_legacy_call_without_sse_keeps_the_token_flow(world: World) -> None:
    """A 2025 call that takes no SSE answer keeps the ct_ flow: there is no stream to ask on
    (the SSE case: test_elicitation_legacy.py)."""
    headers = {
        "Authorization": f"Bearer {world.key}",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }
    init = rpc(
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": {"elicitation": {"form": {}}},
            "clientInfo": {"name": "tests", "version": "1"},
        },
        id_=1,
    )
    opened = await world.http.post(world.a.url + PATH, json=init, headers=headers)
    assert opened.status_code == 200, opened.text
    session = {
        "MCP-Session-Id": opened.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    call = rpc("tools/call", {"name": "delete_order", "arguments": {"order_id": "legacy"}})
    answered = await world.http.post(world.a.url + PATH, json=call, headers=headers | session)
    assert answered.status_code == 200, answered.text
    token_of(answered.json()["result"])
    assert world.hits("legacy") == 0


async def test_the_agent_setting_is_in_the_api_and_the_export(world: World, app: Litestar) -> None:
    async with AsyncTestClient(app=app) as client:
        h = auth(world.admin)
        for slug, mode in (("ops", "auto"), ("ops-token", "token")):
            agent = (await ok(await client.get(f"{BASE}/agents/{slug}", headers=h))).json()
            assert agent["draft"]["confirmation_mode"] == mode
            assert agent["published"]["confirmation_mode"] == mode
        for published in ("false", "true"):
            exported = await ok(
                await client.get(
                    f"{BASE}/export", params={"format": "json", "published": published}, headers=h
                )
            )
            agents = {a["slug"]: a for a in exported.json()["agents"]}
            assert agents["ops-token"]["confirmation_mode"] == "token"
            assert "confirmation_mode" not in agents["ops"]  # the default is left out
        bad = {"slug": "bad-mode", "operations": [], "confirmation_mode": "human"}
        refused = await client.post(f"{BASE}/agents", json=bad, headers=h)
        assert refused.status_code == 400, refused.text
        assert "confirmation_mode" in refused.text


async def test_accept_leads_on_to_the_approval_gate(world: World) -> None:
    """The gate order: validate → confirmation (here the human) → approval."""
    args = {"order_id": "approve-me"}
    state = (await world.ask("delete_invoice", args))["requestState"]
    pending = await world.answer("delete_invoice", args, state, "accept")
    assert pending["isError"] is False, pending
    assert pending["structuredContent"]["status"] == "approval_required"
    assert pending["structuredContent"]["approval_id"]
    assert world.hits("approve-me") == 0  # the approver decides first


async def test_the_call_log_records_each_step(world: World) -> None:
    args = {"order_id": "logged"}
    state = (await world.ask("delete_note", args))["requestState"]
    await world.answer("delete_note", args, state, "decline")
    state = (await world.ask("delete_note", args))["requestState"]
    assert (await world.answer("delete_note", args, state, "accept"))["isError"] is False
    await world.answer("delete_note", args, state, "accept")
    expected = [
        "confirmation_required",
        "confirmation_declined",
        "confirmation_required",
        "ok",
        "confirmation_invalid",
    ]

    async def written() -> bool:
        async with await connect(world.url) as conn:
            cur = await conn.execute(
                "SELECT outcome FROM call_log WHERE tool = 'delete_note' ORDER BY called_at, id"
            )
            return [row["outcome"] for row in await cur.fetchall()] == expected

    await wait_until(written, timeout_s=10)


async def test_the_form_speaks_the_gateway_language(
    world: World, tmp_path_factory: pytest.TempPathFactory
) -> None:
    async with run_gateway(
        world.url, tmp_path_factory.mktemp("ru"), extra_env={"CRANK_LANGUAGE": "ru"}
    ) as ru:
        result = await world.ask("delete_order", {"order_id": "russian"}, gateway=ru)
        message = result["inputRequests"][REQUEST_KEY]["params"]["message"]
        assert message.startswith("ИИ-агент просит удалить: Delete a test order.")
        assert 'order_id = "russian"' in message
        state = result["requestState"]
        args = {"order_id": "russian"}
        declined = await world.answer("delete_order", args, state, "cancel", gateway=ru)
        error = assert_tool_error(declined, "confirmation_declined")
        assert error["message"] == "Пользователь не подтвердил операцию; ничего не изменено."
    assert world.hits("russian") == 0
