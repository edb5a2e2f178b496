"""A repeat of a call whose outcome was delivered asks a human again; the approver is
shown that an identical request was decided within the day before, and what
happened (``recent_identical``, docs/mcp-interface.md "Human approval"): in the
approval-key API (read, list, decision answer), and in chromium on the inbox
and the console's approval page.

The calls go through the official MCP SDK on a real gateway process; the world
is the approval outcome tests' shop (tests.support.approval_outcomes)."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from playwright.async_api import Browser, expect

from shared.db import connect
from shared.engine.masking import MASK
from shared.keys import display_prefix
from tests.support.api import make_token
from tests.support.approval_outcomes import (
    APPROVALS,
    GATED,
    MCP,
    NOTE,
    Shopfront,
    arguments,
    decide,
    gateway_env,
    record,
)
from tests.support.approvals import TOKEN, Shop, behind_the_trigger
from tests.support.browser import browser_page, check_page, launch_browser
from tests.support.console import browser_sign_in
from tests.support.gateway import Gateway, Served, run_control_plane, run_gateway

INBOX = "/v1/default/sales/approvals/inbox"


@pytest.fixture
async def gateway(
    database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> AsyncIterator[Gateway]:
    async with run_gateway(database_url, tmp_path, extra_env=gateway_env(shop)) as served:
        yield served


async def sdk_call(gateway: Gateway, key: str, args: dict[str, Any]) -> Any:
    """tools/call of the gated tool through the official MCP SDK (its newest era)."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
        transport = streamable_http_client(gateway.url + MCP, http_client=http)
        async with McpClient(transport, mode="auto") as mcp:
            return await mcp.call_tool(GATED, args)


async def ask(gateway: Gateway, shopfront: Shopfront, args: dict[str, Any]) -> str:
    asked = await sdk_call(gateway, shopfront.agent_key, args)
    assert asked.structured_content["status"] == "approval_required", asked
    return str(asked.structured_content["approval_id"])


async def denied_then_asked_again(
    gateway: Gateway, http: httpx.AsyncClient, shopfront: Shopfront, args: dict[str, Any]
) -> tuple[str, str]:
    """The first approval denied with NOTE, its outcome delivered to the model, and the
    repeat that asks anew: (first, repeat)."""
    first = await ask(gateway, shopfront, args)
    await decide(http, shopfront.approval_key, first, "deny")
    delivered = await sdk_call(gateway, shopfront.agent_key, args)
    assert delivered.is_error is True
    assert delivered.structured_content["error_code"] == "approval_denied"
    repeat = await ask(gateway, shopfront, args)
    assert repeat != first
    return first, repeat


async def test_the_repeat_of_a_delivered_call_names_the_earlier_decision(
    gateway: Gateway, http: httpx.AsyncClient, shopfront: Shopfront, database_url: str
) -> None:
    first, repeat = await denied_then_asked_again(gateway, http, shopfront, arguments("dup"))
    other = await ask(gateway, shopfront, arguments("other"))  # different arguments

    shown = await record(http, shopfront.approval_key, repeat)
    decided = await record(http, shopfront.approval_key, first)
    assert shown["recent_identical"] == {
        "id": first,
        "status": "denied",
        "decided_at": decided["decided_at"],
        "decided_by": display_prefix(shopfront.approval_key),
        "note": NOTE,
    }
    assert decided["recent_identical"] is None  # nothing identical came before it
    assert (await record(http, shopfront.approval_key, other))["recent_identical"] is None
    key = {"Authorization": f"Bearer {shopfront.approval_key}"}
    listed = (await http.get(f"{APPROVALS}?status=pending", headers=key)).json()["items"]
    flagged = {item["id"]: item["recent_identical"] for item in listed}
    assert flagged[repeat]["id"] == first
    assert flagged[other] is None
    # The decision's answer says it too.
    approved = await http.post(
        f"{APPROVALS}/{repeat}/approve", json={"approve": "yes"}, headers=key
    )
    assert approved.json()["recent_identical"]["id"] == first

    # Decided more than a day before the repeat: no longer "recent".
    await decide(http, shopfront.approval_key, other, "deny")
    async with await connect(database_url, autocommit=True) as conn:
        await behind_the_trigger(
            conn,
            "UPDATE approvals SET created_at = created_at - interval '25 hours', "
            "decided_at = decided_at - interval '25 hours', "
            "expires_at = expires_at - interval '25 hours' WHERE id = %s",
            (other,),
        )
    again = await ask(gateway, shopfront, arguments("other"))
    assert (await record(http, shopfront.approval_key, again))["recent_identical"] is None


async def test_a_secret_in_the_earlier_note_is_masked(
    gateway: Gateway, http: httpx.AsyncClient, shopfront: Shopfront, database_url: str
) -> None:
    first, repeat = await denied_then_asked_again(gateway, http, shopfront, arguments("mask"))
    async with await connect(database_url, autocommit=True) as conn:
        await behind_the_trigger(
            conn, "UPDATE approvals SET note = %s WHERE id = %s", (f"old {TOKEN}", first)
        )
    recent = (await record(http, shopfront.approval_key, repeat))["recent_identical"]
    assert recent["note"] == f"old {MASK}"


# --- in the browser -----------------------------------------------------------


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with launch_browser() as launched:
        yield launched


@pytest.fixture
async def console(database_url: str, tmp_path: Path) -> AsyncIterator[Served]:
    """The control plane as deployed, on the gateway's database."""
    async with run_control_plane(database_url, tmp_path) as served:
        yield served


async def test_the_inbox_and_the_console_flag_the_repeat_before_a_decision(
    browser: Browser,
    gateway: Gateway,
    http: httpx.AsyncClient,
    shopfront: Shopfront,
    database_url: str,
    console: Served,
) -> None:
    first, repeat = await denied_then_asked_again(gateway, http, shopfront, arguments("flag"))
    prefix = display_prefix(shopfront.approval_key)
    async with browser_page(browser) as page:
        await page.goto(gateway.url + INBOX)
        await page.get_by_role("textbox", name="Approval key").fill(shopfront.approval_key)
        await page.get_by_role("button", name="Open the inbox").click()
        pending = page.locator(f"#pending article#{repeat}")
        notice = pending.get_by_role("note")
        await expect(notice).to_contain_text("Asked before.")
        await expect(notice).to_contain_text(f"was denied by {prefix}")
        await expect(notice).to_contain_text(f"Its note: {NOTE}")
        # Shown before the decision controls, in reading order.
        box = await notice.bounding_box()
        approve = await pending.get_by_role("button", name="Approve").bounding_box()
        assert box is not None
        assert approve is not None
        assert box["y"] < approve["y"]
        await check_page(page, "inbox-asked-before")
        # Its link opens the earlier approval, highlighted, in the inbox.
        await notice.get_by_role("link", name=first).click()
        await expect(page.locator(f"article#{first}")).to_have_class(re.compile(r"\blinked\b"))
        # An approval asked for the first time has no such notice.
        assert await page.locator(f"article#{first} .asked-before").count() == 0

    viewer = await make_token(database_url, "viewer", "default")
    async with browser_page(browser) as page:
        await browser_sign_in(page, console.url, viewer)
        await page.goto(f"{console.url}/ui/w/default/approvals/{repeat}")
        notice = page.locator("#asked-before")
        await expect(notice).to_contain_text("Asked before.")
        await expect(notice).to_contain_text(f"was denied by {prefix}")
        await expect(notice).to_contain_text(f"Its note: {NOTE}")
        await check_page(page, "console-approval-asked-before")
        await notice.get_by_role("link", name=first).click()
        await expect(page).to_have_url(re.compile(f"/approvals/{first}$"))
        await expect(page.locator("#asked-before")).to_have_count(0)
