"""Approvals as tasks of the 2026-07-28 tasks extension (docs/architecture.md, "Tasks"),
through two real gateway processes on one database: the task is made on replica A
and read, cancelled and decided on replica B.

No official SDK speaks the extension's client side, so the requests are raw HTTP
and every answer is checked against the extension's shapes (tests.support.tasks).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from shared.db import connect
from tests.support.api import Client
from tests.support.approvals import (
    Shop,
    behind_the_trigger,
    new_key,
    open_shop_workspace,
    order_spec,
)
from tests.support.gateway import run_gateway, wait_until
from tests.support.mcp import modern, request
from tests.support.tasks import (
    CREATE_TASK_RESULT,
    TASKS_META,
    call_tool,
    check,
    task_request,
    task_result,
)
from tests.support.tool_calls import (
    Caller,
    assert_tool_error,
    publish_agent,
    publish_operation,
)

MCP, OTHER_MCP = "/mcp/v1/default/sales", "/mcp/v1/default/other"
APPROVALS = "/v1/default/sales/approvals"
GATED, DIRECT = "approve_lines", "list_lines"
LINES = {"lines": [{"sku": "sku-1", "qty": 2}, {"sku": "sku-2", "qty": 1}]}
NOTE = "Not this week, ask Anna"


@dataclass
class Keys:
    agent: str
    approval: str
    other_agent: str


@pytest.fixture
async def keys(client: Client, admin_token: str, shop: Shop) -> Keys:
    await open_shop_workspace(client, admin_token, shop.port)
    for name, approval in ((GATED, True), (DIRECT, False)):
        spec = order_spec(shop.port)
        spec |= {"name": name, "safety": {"approval": approval}}
        spec["response"] = {"select": "lines"}
        await publish_operation(client, admin_token, spec)
    agent_key = await publish_agent(client, admin_token, "sales", [GATED, DIRECT])
    other_key = await publish_agent(client, admin_token, "other", [GATED])
    shop.answer = json.dumps(LINES)
    return Keys(agent_key, await new_key(client, admin_token, "sales", "approval"), other_key)


@pytest.fixture
async def replicas(
    database_url: str, tmp_path: Path, shop: Shop, keys: Keys
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    env = {
        "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{shop.port}",
        "CRANK_CALL_LOG_FLUSH_MS": "100",
        "CRANK_RATE_LIMIT": "off",
    }
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as a,
        run_gateway(database_url, tmp_path, extra_env=env) as b,
        httpx.AsyncClient(base_url=a.url, timeout=20) as http_a,
        httpx.AsyncClient(base_url=b.url, timeout=20) as http_b,
    ):
        yield http_a, http_b


def arguments(case: str) -> dict[str, Any]:
    return {"item": f"sku-{case}", "request_id": f"req-{case}"}


async def new_task(http: httpx.AsyncClient, keys: Keys, case: str) -> dict[str, Any]:
    """The CreateTaskResult a task-declaring client gets for the gated call of ``case``."""
    message = await call_tool(http, MCP, keys.agent, GATED, arguments(case))
    task = check(message["result"], CREATE_TASK_RESULT)
    assert task["status"] == "working", task
    assert task["taskId"].startswith("approval_")
    assert task["taskId"] in task["statusMessage"]
    assert "human" in task["statusMessage"]
    return task


async def decide(
    http: httpx.AsyncClient, keys: Keys, approval_id: str, action: str
) -> httpx.Response:
    body = {"approve": "yes" if action == "approve" else "no", "note": NOTE}
    return await http.post(
        f"{APPROVALS}/{approval_id}/{action}",
        json=body,
        headers={"Authorization": f"Bearer {keys.approval}"},
    )


async def finished(http: httpx.AsyncClient, keys: Keys, task_id: str) -> dict[str, Any]:
    """tasks/get once the task has left ``working``."""
    latest: dict[str, Any] = {}

    async def done() -> bool:
        latest.update(await task_result(http, MCP, keys.agent, "tasks/get", task_id))
        return bool(latest["status"] != "working")

    await wait_until(done, timeout_s=20)
    return latest


async def test_approved_task_completes_with_the_direct_result_on_the_other_replica(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], keys: Keys, shop: Shop
) -> None:
    a, b = replicas
    task = await new_task(a, keys, "ok")
    task_id = task["taskId"]
    working = await task_result(b, MCP, keys.agent, "tasks/get", task_id)
    assert working["status"] == "working"
    assert task_id in working["statusMessage"]
    assert working["pollIntervalMs"] > 0
    assert working["ttlMs"] > 0
    assert not shop.seen  # nothing has run

    assert (await decide(b, keys, task_id, "approve")).status_code == 200
    done = await finished(b, keys, task_id)
    assert done["status"] == "completed", done
    direct = (await call_tool(b, MCP, keys.agent, DIRECT, arguments("ok")))["result"]
    delivered = done["result"]
    assert delivered["isError"] is False
    assert delivered["resultType"] == "complete"
    assert delivered["structuredContent"] == direct["structuredContent"] == LINES["lines"]
    assert json.loads(delivered["content"][0]["text"]) == json.loads(direct["content"][0]["text"])
    assert delivered["_meta"] == {
        "crank/approval_id": task_id,
        "crank/approval_status": "completed",
    }
    # The result stays readable (on either replica) until the outcome's retention ends ...
    again = await task_result(a, MCP, keys.agent, "tasks/get", task_id)
    assert again["status"] == "completed"
    assert again["result"] == delivered
    # ... and it counts as delivered: the same call asks for a new approval.
    caller = Caller(a, MCP, keys.agent)
    repeat = await caller.call("modern", GATED, arguments("ok"))
    assert repeat["structuredContent"]["status"] == "approval_required"
    assert repeat["structuredContent"]["approval_id"] != task_id


async def test_denied_task_completes_with_approval_denied_and_cancel_then_changes_nothing(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], keys: Keys
) -> None:
    a, b = replicas
    task_id = (await new_task(a, keys, "deny"))["taskId"]
    assert (await decide(a, keys, task_id, "deny")).status_code == 200
    done = await finished(b, keys, task_id)
    assert done["status"] == "completed"  # a tool error is `completed` with isError
    structured = assert_tool_error(done["result"], "approval_denied")
    assert NOTE in structured["message"]
    assert done["result"]["_meta"]["crank/approval_status"] == "denied"
    # Cancelling a finished task is acknowledged, as the extension says; it stays as it is.
    await task_result(b, MCP, keys.agent, "tasks/cancel", task_id)
    after = await task_result(a, MCP, keys.agent, "tasks/get", task_id)
    assert after["status"] == "completed"
    # The same outcome; request_id names each tasks/get.
    before, now = done["result"]["structuredContent"], after["result"]["structuredContent"]
    assert before.pop("request_id") != now.pop("request_id")
    assert now == before


async def test_cancelling_a_pending_task_withdraws_the_approval(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], keys: Keys, shop: Shop, database_url: str
) -> None:
    a, b = replicas
    task_id = (await new_task(a, keys, "cancel"))["taskId"]
    ack = await task_result(b, MCP, keys.agent, "tasks/cancel", task_id)  # the empty ack
    assert ack["resultType"] == "complete"
    assert set(ack) <= {"resultType", "_meta"}
    cancelled = await task_result(a, MCP, keys.agent, "tasks/get", task_id)
    assert cancelled["status"] == "cancelled"
    assert task_id in cancelled["statusMessage"]
    assert "result" not in cancelled
    approve = await decide(b, keys, task_id, "approve")
    assert approve.status_code == 409, approve.text
    read = await b.get(
        f"{APPROVALS}/{task_id}", headers={"Authorization": f"Bearer {keys.approval}"}
    )
    record = read.json()
    assert record["status"] == "denied"
    assert record["decided_by"] == "mcp-client/tasks-cancel"
    assert "tasks/cancel" in record["note"]
    assert not shop.seen
    # The audit row says who withdrew it.
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT actor, action FROM audit_log WHERE resource_name = %s", (task_id,)
        )
        assert await cur.fetchall() == [
            {"actor": "mcp client (tasks/cancel)", "action": "approval.denied"}
        ]


async def test_another_agent_can_neither_see_nor_cancel_the_task(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], keys: Keys
) -> None:
    a, b = replicas
    task_id = (await new_task(a, keys, "mine"))["taskId"]
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        answer = await task_request(b, OTHER_MCP, keys.other_agent, method, task_id)
        assert answer.status_code == 400, answer.text
        error = answer.json()["error"]
        assert error["code"] == -32602
        assert error["message"] == "Failed to retrieve task: Task not found"
    still = await task_result(a, MCP, keys.agent, "tasks/get", task_id)
    assert still["status"] == "working"
    # A made-up id and an id of the wrong shape are as unknown.
    for bogus in ("approval_" + "0" * 32, "x' OR 1=1 --"):
        answer = await task_request(a, MCP, keys.agent, "tasks/get", bogus)
        assert answer.status_code == 400
        assert answer.json()["error"]["code"] == -32602


async def test_a_client_without_the_extension_gets_the_seed_answer(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], keys: Keys
) -> None:
    a, b = replicas
    caller = Caller(a, MCP, keys.agent)
    result = await caller.call("modern", GATED, arguments("seed"))
    structured = result["structuredContent"]
    assert structured["status"] == "approval_required"
    assert set(structured) == {"status", "approval_id", "approval_url", "approve", "deny"}
    # Without the extension in its capabilities, tasks/* is refused with -32021.
    answer = await task_request(
        b, MCP, keys.agent, "tasks/get", structured["approval_id"], tasks=False
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == -32021
    assert error["data"] == {
        "requiredCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}
    }
    # The Mcp-Name header must repeat the task id.
    body = request("tasks/get", {"taskId": structured["approval_id"]}, TASKS_META)
    headers = modern(keys.agent, "tasks/get", **{"Mcp-Name": "approval_" + "1" * 32})
    wrong = await b.post(MCP, json=body, headers=headers)
    assert wrong.status_code == 400
    assert wrong.json()["error"]["code"] == -32020


async def test_a_task_past_the_outcome_retention_has_expired(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], keys: Keys, database_url: str
) -> None:
    a, _ = replicas
    task_id = (await new_task(a, keys, "old"))["taskId"]
    assert (await decide(a, keys, task_id, "deny")).status_code == 200
    async with await connect(database_url, autocommit=True) as conn:
        await behind_the_trigger(
            conn,
            "UPDATE approvals SET decided_at = now() - interval '30 days' WHERE id = %s",
            (task_id,),
        )
    answer = await task_request(a, MCP, keys.agent, "tasks/get", task_id)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"] == "Failed to retrieve task: Task has expired"


async def test_failed_and_expired_approvals_complete_with_their_tool_errors(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], keys: Keys, shop: Shop, database_url: str
) -> None:
    a, b = replicas
    failing = (await new_task(a, keys, "fail"))["taskId"]
    lapsing = (await new_task(a, keys, "lapse"))["taskId"]
    shop.status, shop.answer = 404, '{"error": "SHOP-BODY no such order"}'
    assert (await decide(b, keys, failing, "approve")).status_code == 200
    async with await connect(database_url, autocommit=True) as conn:
        await behind_the_trigger(
            conn,
            "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = %s",
            (lapsing,),
        )
    failed = await finished(b, keys, failing)
    assert failed["status"] == "completed"  # the extension's `failed` is for JSON-RPC errors only
    assert_tool_error(failed["result"], "upstream_not_found")
    assert "SHOP-BODY" not in json.dumps(failed)  # the upstream's text stays in the record
    expired = await task_result(a, MCP, keys.agent, "tasks/get", lapsing)
    assert expired["status"] == "completed"
    assert_tool_error(expired["result"], "approval_expired")
    assert expired["result"]["_meta"]["crank/approval_status"] == "expired"


async def test_a_task_client_with_a_progress_token_gets_its_task_at_once_not_a_wait(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient], keys: Keys
) -> None:
    a, _ = replicas
    meta = {**TASKS_META, "progressToken": "p-1"}
    body = request("tools/call", {"name": GATED, "arguments": arguments("progress")}, meta)
    started = time.perf_counter()
    answer = await a.post(
        MCP, json=body, headers=modern(keys.agent, "tools/call", **{"Mcp-Name": GATED})
    )
    # Waiting would hold the call for CRANK_APPROVAL_WAIT_S (55 s by default).
    assert time.perf_counter() - started < 10
    assert answer.status_code == 200, answer.text
    text = answer.text
    if answer.headers["content-type"].startswith("text/event-stream"):
        text = [line for line in text.splitlines() if line.startswith("data: ")][-1][6:]
    task = check(json.loads(text)["result"], CREATE_TASK_RESULT)
    assert task["status"] == "working"
