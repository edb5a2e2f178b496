"""Approvers are told: signed webhooks through real gateway processes.

A loopback receiver verifies every delivery with the PyPI ``standardwebhooks``
package. The approval under test is the shop's create_order (approval
required, a bearer secret): the agent asks (approval.created), an approval
key approves (approval.decided), the worker runs it (approval.completed).
Retries, a gateway killed mid-delivery, destinations the SSRF guard or the
egress policy refuse, the Slack format, and that no secret value leaves in
any body. The enqueue trigger is checked on its own at the bottom, for every
transition.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg.types.json import Jsonb

from mcp_gateway.webhooks.payloads import ApprovalLinks, render
from shared.db import connect
from shared.engine.masking import MASK, NO_SECRETS
from tests.support.api import Client, auth, grant_egress
from tests.support.approvals import TOKEN, TOOL, Shop, execute, new_key, publish_shop
from tests.support.gateway import Gateway, run_gateway, wait_until
from tests.support.metrics import served_counts
from tests.support.processes import free_port
from tests.support.tool_calls import BASE, Caller, ok
from tests.support.webhooks import Receiver, serve_receiver, subscribe

MCP = "/mcp/v1/default/sales"
APPROVALS = "/v1/default/sales/approvals"
PUBLIC_URL = "https://crank.example.com"


@dataclass
class Setup:
    """The shop published behind approval, a receiver it may reach, and their keys."""

    client: Client
    database_url: str
    tmp_path: Path
    shop: Shop
    receiver: Receiver
    admin: str
    agent_key: str
    approval_key: str

    def gateway(self) -> AbstractAsyncContextManager[Gateway]:
        """A gateway process with the shop and the receiver allowlisted, backoff short."""
        env = gateway_env(self.shop.port, self.receiver.port)
        return run_gateway(self.database_url, self.tmp_path, extra_env=env)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with serve_receiver() as state:
        yield state


@pytest.fixture
async def shop_setup(
    client: Client,
    database_url: str,
    tmp_path: Path,
    admin_token: str,
    shop: Shop,
    receiver: Receiver,
) -> Setup:
    await publish_shop(client, admin_token, shop.port)
    await grant_egress(client, admin_token, "default", f"127.0.0.1:{receiver.port}")
    return Setup(
        client=client,
        database_url=database_url,
        tmp_path=tmp_path,
        shop=shop,
        receiver=receiver,
        admin=admin_token,
        agent_key=await new_key(client, admin_token, "sales", "agent"),
        approval_key=await new_key(client, admin_token, "sales", "approval"),
    )


def gateway_env(*ports: int) -> dict[str, str]:
    return {
        "CRANK_UPSTREAM_ALLOWLIST": ",".join(f"127.0.0.1:{port}" for port in ports),
        "CRANK_WEBHOOK_RETRY_BASE_MS": "100",
        "CRANK_PUBLIC_URL": PUBLIC_URL,
        "CRANK_LOG_LEVEL": "info",
    }


async def ask(gateway: Gateway, key: str, item: str = "sku-1") -> str:
    """tools/call create_order; the approval id of its approval_required answer."""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
        result = await Caller(http, MCP, key).call(
            "legacy", TOOL, {"item": item, "request_id": "r-1"}
        )
    assert result["structuredContent"]["status"] == "approval_required", result
    return str(result["structuredContent"]["approval_id"])


async def approve(gateway: Gateway, key: str, approval_id: str) -> None:
    async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
        answer = await http.post(
            f"{APPROVALS}/{approval_id}/approve",
            json={"approve": "yes"},
            headers={"Authorization": f"Bearer {key}"},
        )
    assert answer.status_code == 200, answer.text


async def delivery_log(client: Client, admin: str, webhook_id: str) -> list[dict[str, Any]]:
    page = await ok(
        await client.get(
            f"{BASE}/agents/sales/webhooks/{webhook_id}/deliveries", headers=auth(admin)
        )
    )
    items: list[dict[str, Any]] = page.json()["items"]
    return items


async def test_created_decided_and_completed_are_delivered_signed_and_masked(
    shop_setup: Setup,
) -> None:
    client, receiver = shop_setup.client, shop_setup.receiver
    hook = await subscribe(client, shop_setup.admin, receiver.url)
    receiver.secret = hook["secret"]
    async with shop_setup.gateway() as gateway:
        # The shop's token in an argument: it must reach no receiver.
        approval_id = await ask(gateway, shop_setup.agent_key, item=f"sku {TOKEN}")

        async def told(count: int) -> bool:
            return len(receiver.received) >= count

        await wait_until(lambda: told(1), timeout_s=10)
        await approve(gateway, shop_setup.approval_key, approval_id)
        await wait_until(lambda: told(3), timeout_s=15)

    assert all(r.verified is not None for r in receiver.received), "a signature did not verify"
    assert receiver.events() == ["approval.created", "approval.decided", "approval.completed"]
    ids = [r.webhook_id for r in receiver.received]
    assert len(set(ids)) == 3
    assert all(i.startswith("msg_") for i in ids)
    created, decided, completed = (r.verified for r in receiver.received)
    assert created["data"] == {
        "approval_id": approval_id,
        "workspace": "default",
        "agent": "sales",
        "tool": TOOL,
        "version": 1,
        "status": "pending",
        "decided_by": None,
        "note": None,
        "arguments": {"item": f"sku {MASK}", "request_id": "r-1"},
        # A person opens the approval in the inbox; a program reads its record.
        "approval_url": f"{PUBLIC_URL}/v1/default/sales/approvals/inbox#{approval_id}",
        "api_url": f"{PUBLIC_URL}/v1/default/sales/approvals/{approval_id}",
    }
    assert decided["data"]["status"] == "approved"
    assert decided["data"]["decided_by"].startswith("crk_approval_")
    assert completed["data"]["status"] == "completed"
    for r in receiver.received:
        assert TOKEN.encode() not in r.body
        assert hook["secret"].encode() not in r.body
        assert r.headers["content-type"] == "application/json"
    log = await delivery_log(client, shop_setup.admin, hook["id"])
    assert [(d["event"], d["status"], d["attempts"], d["last_status"]) for d in log] == [
        ("approval.completed", "delivered", 1, 204),
        ("approval.decided", "delivered", 1, 204),
        ("approval.created", "delivered", 1, 204),
    ]
    assert [d["webhook_id"] for d in reversed(log)] == ids


async def test_a_failing_receiver_is_retried_with_backoff_under_one_webhook_id(
    shop_setup: Setup,
) -> None:
    client, receiver = shop_setup.client, shop_setup.receiver
    hook = await subscribe(client, shop_setup.admin, receiver.url, events=["approval.created"])
    receiver.secret = hook["secret"]
    receiver.fail_first = 3
    async with shop_setup.gateway() as gateway:
        await ask(gateway, shop_setup.agent_key)

        async def delivered() -> bool:
            log = await delivery_log(client, shop_setup.admin, hook["id"])
            return bool(log) and log[0]["status"] == "delivered"

        await wait_until(delivered, timeout_s=15)
        counts = await served_counts(
            gateway.metrics_port, "crank_webhook_attempts_total", "outcome"
        )

    assert counts == {"retry": 3, "delivered": 1}
    assert len(receiver.received) == 4
    assert len({r.webhook_id for r in receiver.received}) == 1
    assert all(r.verified is not None for r in receiver.received)
    assert len({r.body for r in receiver.received}) == 1  # the same bytes every attempt
    # Equal jitter: each wait is at least half of 100 ms doubled per failed attempt.
    gaps = [b.at - a.at for a, b in zip(receiver.received, receiver.received[1:], strict=False)]
    assert [gap >= 0.05 * 2**n * 0.9 for n, gap in enumerate(gaps)] == [True] * 3, gaps
    (entry,) = await delivery_log(client, shop_setup.admin, hook["id"])
    assert (entry["attempts"], entry["last_status"], entry["last_error"]) == (4, 204, None)


async def test_a_gateway_killed_mid_delivery_delivers_again_with_the_same_webhook_id(
    shop_setup: Setup,
) -> None:
    client, receiver = shop_setup.client, shop_setup.receiver
    hook = await subscribe(client, shop_setup.admin, receiver.url, events=["approval.created"])
    receiver.secret = hook["secret"]
    receiver.hold = True
    async with shop_setup.gateway() as first:
        await ask(first, shop_setup.agent_key)
        await wait_until(lambda: _is_set(receiver), timeout_s=10)
        os.killpg(first.process.pid, signal.SIGKILL)
        first.process.wait(timeout=10)
    receiver.gate.set()
    # The dead process's lease runs out (backdated here rather than waited for).
    async with await connect(shop_setup.database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT status, attempts FROM webhook_deliveries WHERE subscription_id = %s",
            (hook["id"],),
        )
        assert await cur.fetchall() == [{"status": "delivering", "attempts": 1}]
    await execute(
        shop_setup.database_url,
        "UPDATE webhook_deliveries SET lease_expires_at = now() - interval '1 second'",
    )
    async with shop_setup.gateway():

        async def delivered() -> bool:
            log = await delivery_log(client, shop_setup.admin, hook["id"])
            return bool(log[0]["status"] == "delivered")

        await wait_until(delivered, timeout_s=15)
    assert len(receiver.received) == 2
    assert receiver.received[0].webhook_id == receiver.received[1].webhook_id
    assert all(r.verified is not None for r in receiver.received)
    (entry,) = await delivery_log(client, shop_setup.admin, hook["id"])
    assert entry["attempts"] == 2


async def _is_set(receiver: Receiver) -> bool:
    return receiver.entered.is_set()


async def test_destinations_the_guard_or_the_egress_policy_refuse_fail_unsent(
    shop_setup: Setup,
) -> None:
    client, receiver = shop_setup.client, shop_setup.receiver
    # Both on loopback: a guard that failed would reach this machine, nothing else.
    not_allowlisted = f"http://127.0.0.1:{free_port()}/hooks"  # the operator allows it nowhere
    receiver_hook = await subscribe(client, shop_setup.admin, receiver.url)
    guard_hook = await subscribe(client, shop_setup.admin, not_allowlisted)
    # The operator allowlists the receiver, but the workspace may only call the shop.
    h = auth(shop_setup.admin)
    egress = await ok(await client.get(f"{BASE}/egress", headers=h))
    await ok(
        await client.put(
            f"{BASE}/egress/grants",
            json={"grants": [f"127.0.0.1:{shop_setup.shop.port}"]},
            headers=auth(shop_setup.admin, egress.headers["etag"]),
        )
    )
    async with shop_setup.gateway() as gateway:
        await ask(gateway, shop_setup.agent_key)

        async def both_failed() -> bool:
            logs = [
                await delivery_log(client, shop_setup.admin, hook["id"])
                for hook in (receiver_hook, guard_hook)
            ]
            return all(log and log[0]["status"] == "failed" for log in logs)

        await wait_until(both_failed, timeout_s=10)
    assert receiver.received == []
    (egress_refused,) = await delivery_log(client, shop_setup.admin, receiver_hook["id"])
    (guard_refused,) = await delivery_log(client, shop_setup.admin, guard_hook["id"])
    assert egress_refused["attempts"] == 1
    assert guard_refused["attempts"] == 1
    assert "egress policy does not allow 127.0.0.1" in egress_refused["last_error"]
    assert "refused addresses" in guard_refused["last_error"]
    assert egress_refused["last_status"] is None
    assert guard_refused["last_status"] is None


async def test_the_slack_format_names_tool_arguments_asker_and_link(shop_setup: Setup) -> None:
    client, receiver = shop_setup.client, shop_setup.receiver
    hook = await subscribe(
        client, shop_setup.admin, receiver.url, events=["approval.created"], format="slack"
    )
    receiver.secret = hook["secret"]
    async with shop_setup.gateway() as gateway:
        item = f"<b>&{TOKEN} ```*bold*````` x`"
        approval_id = await ask(gateway, shop_setup.agent_key, item=item)

        async def told() -> bool:
            return bool(receiver.received)

        await wait_until(told, timeout_s=10)
    (message,) = receiver.received
    assert message.verified is not None  # signed as well: Slack ignores the headers
    body = json.loads(message.body)
    assert set(body) == {"text", "blocks"}
    assert TOOL in body["text"]
    assert "default/sales" in body["text"]
    assert all(block["type"] == "section" for block in body["blocks"])
    texts = "\n".join(block["text"]["text"] for block in body["blocks"])
    inbox = f"{PUBLIC_URL}/v1/default/sales/approvals/inbox#{approval_id}"
    assert f"<{inbox}|{approval_id}>" in texts
    assert f"&lt;b&gt;&amp;{MASK}" in texts  # escaped for Slack's mrkdwn, the token masked
    assert "*Agent:* default/sales" in texts
    # The arguments' code block: backticks in an argument cannot close it.
    (code,) = [b["text"]["text"] for b in body["blocks"] if b["text"]["text"].startswith("```")]
    assert code.endswith("}```")
    assert "``" not in code[3:-3]
    assert "```*bold*````` x`" in code.replace("\u200b", "")  # shown as typed
    assert TOKEN not in message.body.decode()


def test_slack_arguments_are_cut_after_escaping_and_never_inside_an_entity() -> None:
    links = ApprovalLinks(page="/inbox#approval_x", api="/approval_x")
    event: dict[str, Any] = {"approval_id": "approval_x", "workspace": "default"}
    event |= {"agent": "sales", "tool": TOOL, "version": 1, "status": "pending"}
    for filler in ("&" * 3000, "x&" * 1500, "`" * 3000):
        body = render(
            "slack", "approval.created", {**event, "arguments": {"a": filler}}, NO_SECRETS, links
        )
        texts = [block["text"]["text"] for block in json.loads(body)["blocks"]]
        code = texts[1]
        assert len(code) <= 3000  # a Slack section's limit
        assert code.endswith("…```")
        assert "``" not in code[3:-3]
        assert re.search("&[a-z]{0,3}…", code) is None, code[-12:]


async def test_the_trigger_enqueues_one_delivery_per_transition_and_subscribed_event(
    shop_setup: Setup,
) -> None:
    client, database_url, receiver = shop_setup.client, shop_setup.database_url, shop_setup.receiver
    everything = await subscribe(client, shop_setup.admin, receiver.url)
    ends = await subscribe(
        client, shop_setup.admin, receiver.url, events=["approval.failed", "approval.expired"]
    )
    revoked = await subscribe(client, shop_setup.admin, receiver.url)
    await ok(
        await client.delete(
            f"{BASE}/agents/sales/webhooks/{revoked['id']}", headers=auth(shop_setup.admin)
        )
    )
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            """SELECT o.id AS op, o.workspace_id AS ws, a.id AS agent FROM operations o
                 JOIN agents a ON a.workspace_id = o.workspace_id AND a.slug = 'sales'"""
        )
        ids = await cur.fetchone()
        assert ids is not None

        async def new(approval_id: str) -> None:
            await conn.execute(
                """INSERT INTO approvals (id, workspace_id, agent_id, operation_id, tool, version,
                                          arguments, arguments_hash, request, expires_at)
                   VALUES (%s, %s, %s, %s, %s, 1, %s, %s, '{}', now() + interval '1 hour')""",
                (
                    approval_id,
                    ids["ws"],
                    ids["agent"],
                    ids["op"],
                    TOOL,
                    Jsonb({}),
                    approval_id.encode(),
                ),
            )

        async def move(approval_id: str, *statuses: str) -> None:
            for status in statuses:
                await conn.execute(
                    "UPDATE approvals SET status = %s WHERE id = %s", (status, approval_id)
                )

        await new("a1")
        await move("a1", "approved", "executing", "executing", "approved", "executing")
        await move("a1", "completed")
        await new("a2")
        await move("a2", "denied", "approved")  # the second is refused by the transition trigger
        await new("a3")
        await move("a3", "expired")
        await new("a4")
        await move("a4", "approved", "executing", "failed")
        cur = await conn.execute(
            """SELECT subscription_id, approval_id, event, payload->>'status' AS status
                 FROM webhook_deliveries ORDER BY id"""
        )
        rows = [tuple(row.values()) for row in await cur.fetchall()]
    every = everything["id"]
    assert [r for r in rows if r[0] == every] == [
        (every, "a1", "approval.created", "pending"),
        (every, "a1", "approval.decided", "approved"),
        (every, "a1", "approval.completed", "completed"),
        (every, "a2", "approval.created", "pending"),
        (every, "a2", "approval.decided", "denied"),
        (every, "a3", "approval.created", "pending"),
        (every, "a3", "approval.expired", "expired"),
        (every, "a4", "approval.created", "pending"),
        (every, "a4", "approval.decided", "approved"),
        (every, "a4", "approval.failed", "failed"),
    ]
    assert [r[1:3] for r in rows if r[0] == ends["id"]] == [
        ("a3", "approval.expired"),
        ("a4", "approval.failed"),
    ]
    assert not [r for r in rows if r[0] == revoked["id"]]
