"""A finished approval's outcome reaches the model on a repeat call, once
(docs/architecture.md, "Approval outcomes"), through two real gateway processes
on one database: each approval is asked for and decided on replica A, its
outcome delivered on replica B, in both protocol eras.

The shop (tests.support.approvals) answers a fixed body, so the same call
without approval (``list_lines``, the twin of ``approve_lines``) gives what a
direct call gives; its selection is an array, wrapped as ``{"items": [...]}``
for the 2025 revisions, and cut to one item, so both are marked truncated.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from shared.db import connect
from shared.engine.errors import suggested_action
from tests.support.api import Client, auth
from tests.support.approval_outcomes import (
    DIRECT,
    GATED,
    LINES,
    MCP,
    NOTE,
    Replica,
    Shopfront,
    arguments,
    decide,
    finished,
    gateway_env,
    record,
)
from tests.support.approvals import Shop, behind_the_trigger
from tests.support.gateway import run_gateway, wait_until
from tests.support.tool_calls import BASE, ERAS, Caller, assert_tool_error


async def ask(caller: Caller, era: str, case: str) -> str:
    """The approval id of an approval_required answer to the gated call of ``case``."""
    result = await caller.call(era, GATED, arguments(case))
    assert result["isError"] is False, result
    assert result["structuredContent"]["status"] == "approval_required", result
    assert "_meta" not in result
    return str(result["structuredContent"]["approval_id"])


async def overdue(database_url: str, approval_id: str) -> None:
    """The pending row's time has run out (it expires when next met)."""
    async with await connect(database_url, autocommit=True) as conn:
        await behind_the_trigger(
            conn,
            "UPDATE approvals SET expires_at = now() - interval '1 second' WHERE id = %s",
            (approval_id,),
        )


def meta_of(result: dict[str, Any], approval_id: str, status: str) -> None:
    assert result["_meta"] == {"crank/approval_id": approval_id, "crank/approval_status": status}


@pytest.mark.parametrize("era", ERAS)
async def test_each_outcome_is_delivered_once_on_the_other_replica(
    era: str,
    replicas: tuple[Replica, Replica],
    shopfront: Shopfront,
    shop: Shop,
    client: Client,
    database_url: str,
) -> None:
    a, b = replicas
    on_a, on_b = Caller(a.http, MCP, shopfront.agent_key), Caller(b.http, MCP, shopfront.agent_key)
    key = shopfront.approval_key
    cases = ("completed", "failed", "denied", "expired")
    ids = {case: await ask(on_a, era, case) for case in cases}
    # Before any decision a repeat on B answers the same approval.
    assert await ask(on_b, era, "completed") == ids["completed"]

    await decide(a.http, key, ids["completed"], "approve")
    await finished(a.http, key, ids["completed"], "completed")
    shop.status, shop.answer = 404, '{"error": "SHOP-BODY no such order"}'
    await decide(a.http, key, ids["failed"], "approve")
    await finished(a.http, key, ids["failed"], "failed")
    shop.status, shop.answer = 201, json.dumps(LINES)
    await decide(a.http, key, ids["denied"], "deny")
    await overdue(database_url, ids["expired"])
    upstream_calls = len(shop.seen)

    # completed: what the direct twin gives, plus the approval in _meta.
    delivered = await on_b.call(era, GATED, arguments("completed"))
    direct = await on_b.call(era, DIRECT, arguments("completed"))
    assert delivered["isError"] is False
    assert delivered["structuredContent"] == direct["structuredContent"]
    # The same JSON; its key order is jsonb's, as in an idempotent replay.
    [text], [direct_text] = delivered["content"], direct["content"]
    assert json.loads(text["text"]) == json.loads(direct_text["text"])
    expected = LINES["lines"][:1] if era == "modern" else {"items": LINES["lines"][:1]}
    assert delivered["structuredContent"] == expected
    assert direct["_meta"] == {"crank/truncated": True}
    assert delivered["_meta"] == {
        "crank/approval_id": ids["completed"],
        "crank/approval_status": "completed",
        "crank/truncated": True,
    }

    # failed: the recorded closed-list error, its flag and suggested action from the table.
    failed = await on_b.call(era, GATED, arguments("failed"))
    error = assert_tool_error(failed, "upstream_not_found")
    payload = (await record(a.http, key, ids["failed"]))["response_payload"]
    assert error["message"] == payload["message"]
    assert error["suggested_action"] == suggested_action("upstream_not_found")
    assert "SHOP-BODY" not in json.dumps(failed)  # the upstream's text stays in the record
    meta_of(failed, ids["failed"], "failed")

    # denied: approval_denied with the approver's note.
    denied = await on_b.call(era, GATED, arguments("denied"))
    error = assert_tool_error(denied, "approval_denied")
    assert error["message"] == f'A human denied this call. The approver\'s note: "{NOTE}"'
    meta_of(denied, ids["denied"], "denied")

    # expired (met overdue by this very call): approval_expired, "call again".
    expired = await on_b.call(era, GATED, arguments("expired"))
    error = assert_tool_error(expired, "approval_expired")
    assert error["suggested_action"] == suggested_action("approval_expired")
    assert "call again" in error["suggested_action"]
    meta_of(expired, ids["expired"], "expired")

    # Delivered once: the next identical call, on either replica, asks anew.
    for n, case in enumerate(cases):
        again = await ask((on_a, on_b)[n % 2], era, case)
        assert again not in ids.values()
        assert (await record(a.http, key, again))["status"] == "pending"
    assert len(shop.seen) == upstream_calls + 1  # only the direct twin went upstream

    async def logged() -> dict[str, str]:
        calls = await client.get(f"{BASE}/calls?tool={GATED}", headers=auth(shopfront.admin))
        return {
            e["outcome"]: e["approval_id"]
            for e in calls.json()["items"]
            if e["outcome"].startswith("approval_") and e["outcome"] != "approval_required"
        }

    await wait_until(lambda: _has(logged, 4))
    assert await logged() == {f"approval_{case}": ids[case] for case in cases}
    only = await client.get(
        f"{BASE}/calls?outcome=approval_completed", headers=auth(shopfront.admin)
    )
    [entry] = only.json()["items"]
    assert (entry["approval_id"], entry["upstream_status"], entry["attempts"]) == (
        ids["completed"],
        None,
        0,
    )


async def _has(read: Any, count: int) -> bool:
    return len(await read()) >= count


async def test_concurrent_repeats_on_two_replicas_deliver_the_outcome_once(
    replicas: tuple[Replica, Replica], shopfront: Shopfront, database_url: str
) -> None:
    a, b = replicas
    callers = [Caller(r.http, MCP, shopfront.agent_key) for r in (a, b) for _ in range(2)]
    first = await ask(callers[0], "modern", "race")
    await decide(b.http, shopfront.approval_key, first, "deny")

    results = await asyncio.gather(
        *(callers[n % 4].call(ERAS[n % 2], GATED, arguments("race")) for n in range(16))
    )
    outcomes = [r for r in results if r["isError"]]
    asked = {r["structuredContent"]["approval_id"] for r in results if not r["isError"]}
    assert len(outcomes) == 1, results
    assert_tool_error(outcomes[0], "approval_denied")
    # Every loser went on as a call after the delivery: one new approval, shared.
    assert len(asked) == 1
    assert first not in asked
    async with await connect(database_url, autocommit=True) as conn:
        rows = await (
            await conn.execute("SELECT id, status, delivered_at FROM approvals ORDER BY created_at")
        ).fetchall()
    assert [(r["id"], r["status"]) for r in rows] == [(first, "denied"), (*asked, "pending")]
    assert rows[0]["delivered_at"] is not None
    assert rows[1]["delivered_at"] is None


async def test_an_outcome_older_than_the_retention_is_not_delivered_and_russian_words(
    database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> None:
    env = gateway_env(shop, CRANK_APPROVAL_OUTCOME_RETENTION_S="60", CRANK_LANGUAGE="ru")
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=20) as http,
    ):
        caller = Caller(http, MCP, shopfront.agent_key)
        asked = await caller.call("legacy", GATED, arguments("old"))
        assert "теми же аргументами" in asked["content"][1]["text"]
        assert "для интерфейса подтверждения" in asked["content"][1]["text"]
        old = asked["structuredContent"]["approval_id"]
        fresh = await ask(caller, "legacy", "fresh")
        for approval_id in (old, fresh):
            await decide(http, shopfront.approval_key, approval_id, "deny")
        async with await connect(database_url, autocommit=True) as conn:
            await behind_the_trigger(
                conn,
                "UPDATE approvals SET decided_at = now() - interval '61 seconds' WHERE id = %s",
                (old,),
            )

        # Finished 61 s ago with a 60 s retention: a new approval, the old outcome stays unsent.
        again = await ask(caller, "modern", "old")
        assert again != old
        # Within the retention: delivered, in Russian, with the note.
        denied = await caller.call("modern", GATED, arguments("fresh"))
        error = assert_tool_error(denied, "approval_denied")
        assert (
            error["message"] == f"Человек отклонил этот вызов. Комментарий согласующего: «{NOTE}»"
        )
        assert error["suggested_action"] == suggested_action("approval_denied", "ru")
        async with await connect(database_url, autocommit=True) as conn:
            cur = await conn.execute(
                "SELECT id, delivered_at IS NOT NULL AS delivered FROM approvals WHERE id IN (%s, %s)",
                (old, fresh),
            )
            delivered = {r["id"]: r["delivered"] for r in await cur.fetchall()}
        assert delivered == {old: False, fresh: True}


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_seed_urls_stay_and_the_words_say_they_are_the_approvers(
    mode: str, replicas: tuple[Replica, Replica], shopfront: Shopfront
) -> None:
    """The seed's approve/deny stay in structuredContent; the model's words say they are
    for the approver's front end, which the agent key indeed cannot use."""
    a, _ = replicas
    headers = {"Authorization": f"Bearer {shopfront.agent_key}"}
    async with httpx2.AsyncClient(headers=headers) as http:
        transport = streamable_http_client(a.gateway.url + MCP, http_client=http)
        async with McpClient(transport, mode=mode) as mcp:
            asked = await mcp.call_tool(GATED, arguments(f"urls-{mode}"))
    structured = asked.structured_content
    url = structured["approval_url"]
    assert structured["approve"] == {
        "method": "POST",
        "url": f"{url}/approve",
        "body": {"approve": "yes"},
    }
    assert structured["deny"] == {"method": "POST", "url": f"{url}/deny", "body": {"approve": "no"}}
    words = [block.text for block in asked.content if block.type == "text"][1]
    assert "approve and deny URLs are for the approver's front end" in words, words
    assert "this agent's key cannot use them" in words, words
    for action in ("approve", "deny"):
        tried = await a.http.post(
            structured[action]["url"],
            json=structured[action]["body"],
            headers=auth(shopfront.agent_key),
        )
        assert tried.status_code == 403, tried.text
    assert (await record(a.http, shopfront.approval_key, structured["approval_id"]))[
        "status"
    ] == "pending"


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_sdk_gets_the_outcome_on_a_repeat_call(
    mode: str, replicas: tuple[Replica, Replica], shopfront: Shopfront
) -> None:
    """The Python SDK in its newest era (auto) and in the 2025 one: asked on A, delivered on B."""
    a, b = replicas

    async def call_tool(replica: Replica) -> Any:
        headers = {"Authorization": f"Bearer {shopfront.agent_key}"}
        async with httpx2.AsyncClient(headers=headers) as http:
            transport = streamable_http_client(replica.gateway.url + MCP, http_client=http)
            async with McpClient(transport, mode=mode) as mcp:
                return await mcp.call_tool(GATED, arguments(f"sdk-{mode}"))

    asked = await call_tool(a)
    assert asked.is_error is False
    approval_id = asked.structured_content["approval_id"]
    words = [block.text for block in asked.content if block.type == "text"]
    assert json.loads(words[0]) == asked.structured_content
    assert "call this tool again with the same arguments" in words[1].lower()
    await decide(a.http, shopfront.approval_key, approval_id, "approve")
    await finished(a.http, shopfront.approval_key, approval_id, "completed")

    delivered = await call_tool(b)
    assert delivered.is_error is False
    # auto speaks 2026-07-28 (no wrapping); the 2025 era wraps the array.
    first = LINES["lines"][:1]
    assert delivered.structured_content == (first if mode == "auto" else {"items": first})
    assert delivered.meta == {
        "crank/approval_id": approval_id,
        "crank/approval_status": "completed",
        "crank/truncated": True,
    }
    again = await call_tool(b)
    assert again.structured_content["status"] == "approval_required"
    assert again.structured_content["approval_id"] != approval_id
