"""The approver inbox through a real gateway process: the page and its two files
with their security headers at both paths, the gateway's own public origin
allowed to decide, then chromium driving the page: the key asked for once and
kept in the tab only, the pending approval with its arguments, a decision with
a note whose outcome the repeat tools/call of the official MCP SDK returns,
refusals in words, and the approval a webhook links to (``#approval_...``).

The world is the approval outcome tests' shop (tests.support.approval_outcomes):
``approve_lines`` behind approval, answering a fixed body.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from html.parser import HTMLParser
from importlib.resources import files
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from playwright.async_api import Browser, Locator, Page, expect

from shared.keys import display_prefix
from tests.support.approval_outcomes import (
    GATED,
    LINES,
    MCP,
    NOTE,
    Shopfront,
    arguments,
    decide,
    gateway_env,
)
from tests.support.approvals import Shop
from tests.support.browser import browser_page, check_page, launch_browser
from tests.support.gateway import Gateway, run_gateway

INBOX = "/v1/default/sales/approvals/inbox"
PUBLIC_URL = "https://approvals.example.com"
EXPECTED_HEADERS = {
    "content-security-policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
        "img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
    ),
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "cache-control": "no-store",
}
STATIC = files("mcp_gateway.inbox") / "static"


@pytest.fixture
async def gateway(
    database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> AsyncIterator[Gateway]:
    env = gateway_env(shop, CRANK_PUBLIC_URL=PUBLIC_URL)
    async with run_gateway(database_url, tmp_path, extra_env=env) as served:
        yield served


@pytest.fixture(scope="module")
async def browser() -> AsyncIterator[Browser]:
    async with launch_browser() as launched:
        yield launched


def security_headers(answer: httpx.Response) -> dict[str, str]:
    return {name: answer.headers.get(name) for name in EXPECTED_HEADERS}


async def sdk_call(gateway: Gateway, key: str, case: str) -> Any:
    """tools/call of the gated tool through the official MCP SDK (its newest era)."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
        transport = streamable_http_client(gateway.url + MCP, http_client=http)
        async with McpClient(transport, mode="auto") as mcp:
            return await mcp.call_tool(GATED, arguments(case))


async def ask(gateway: Gateway, shopfront: Shopfront, case: str) -> str:
    asked = await sdk_call(gateway, shopfront.agent_key, case)
    assert asked.structured_content["status"] == "approval_required", asked
    return str(asked.structured_content["approval_id"])


# --- served as files ----------------------------------------------------------


async def test_the_page_is_served_with_a_strict_policy_under_both_paths(
    http: httpx.AsyncClient,
) -> None:
    for prefix in ("", "/mcp"):
        answer = await http.get(prefix + INBOX)  # no key: the page asks for it itself
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "text/html; charset=utf-8"
        assert security_headers(answer) == EXPECTED_HEADERS
        assert answer.content == (STATIC / "inbox.html").read_bytes()


async def test_the_script_stylesheet_and_icon_are_served_beside_the_page(
    http: httpx.AsyncClient,
) -> None:
    page = (await http.get(INBOX)).text
    # Named relative to the page, so any path prefix in front of the gateway works.
    assert '<script src="inbox/inbox.js" defer></script>' in page
    assert '<link rel="stylesheet" href="inbox/inbox.css">' in page
    # An icon of its own, so the browser asks for no /favicon.ico (a 404 on every visit).
    assert '<link rel="icon" href="inbox/favicon.svg" type="image/svg+xml">' in page
    for prefix in ("", "/mcp"):
        for name, content_type in (
            ("inbox.js", "text/javascript; charset=utf-8"),
            ("inbox.css", "text/css; charset=utf-8"),
            ("favicon.svg", "image/svg+xml"),
        ):
            answer = await http.get(f"{prefix}{INBOX}/{name}")
            assert answer.status_code == 200
            assert answer.headers["content-type"] == content_type
            assert security_headers(answer) == EXPECTED_HEADERS
            assert answer.content == (STATIC / name).read_bytes()


async def test_the_inbox_answers_only_get_and_knows_only_its_files(
    http: httpx.AsyncClient,
) -> None:
    posted = await http.post(INBOX, json={})
    assert posted.status_code == 405
    assert posted.headers["allow"] == "GET"
    assert posted.json()["code"] == "method_not_allowed"
    assert (await http.get(f"{INBOX}/other.js")).status_code == 404


class _Markup(HTMLParser):
    """Every tag with its attributes, and whether a script has a body."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.inline_code: list[str] = []
        self._open: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._open = tag

    def handle_data(self, data: str) -> None:
        if self._open in ("script", "style") and data.strip():
            self.inline_code.append(data)

    def handle_endtag(self, tag: str) -> None:
        self._open = None


def test_the_page_holds_no_inline_code_and_the_script_writes_no_markup() -> None:
    markup = _Markup()
    markup.feed((STATIC / "inbox.html").read_text())
    assert markup.inline_code == []
    for tag, attributes in markup.tags:
        assert tag != "style"
        assert "style" not in attributes, tag
        assert not [name for name in attributes if name.startswith("on")], tag
        for name in ("src", "href"):  # nothing from another origin
            assert "//" not in (attributes.get(name) or ""), tag
    lines = (STATIC / "inbox.js").read_text().splitlines()
    script = "\n".join(line for line in lines if not line.strip().startswith("//"))  # code only
    # Values go on the page as text only; the key never goes to storage that outlives the tab.
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script
    for storage in ("localStorage", "document.cookie"):
        assert storage not in script


async def test_the_gateways_own_public_origin_may_decide_and_others_may_not(
    http: httpx.AsyncClient, gateway: Gateway, shopfront: Shopfront
) -> None:
    """The inbox's POSTs are same-origin, so they carry CRANK_PUBLIC_URL's origin."""
    approval_id = await ask(gateway, shopfront, "origin")
    key = {"Authorization": f"Bearer {shopfront.approval_key}"}
    path = f"/v1/default/sales/approvals/{approval_id}/approve"
    elsewhere = await http.post(
        path, json={"approve": "yes"}, headers={**key, "Origin": "https://evil.example.com"}
    )
    assert elsewhere.status_code == 403
    assert elsewhere.json()["code"] == "forbidden"
    own = await http.post(path, json={"approve": "yes"}, headers={**key, "Origin": PUBLIC_URL})
    assert own.status_code == 200
    assert own.json()["status"] == "approved"


# --- in the browser -----------------------------------------------------------


async def enter_key(page: Page, key: str) -> None:
    await key_input(page).fill(key)
    await page.get_by_role("button", name="Open the inbox").click()


def key_input(page: Page) -> Locator:
    return page.get_by_role("textbox", name="Approval key")


def card(page: Page, approval_id: str, listing: str = "pending") -> Locator:
    return page.locator(f"#{listing} article#{approval_id}")


async def stored_key(page: Page) -> Any:
    return await page.evaluate(
        "[Object.keys(sessionStorage).map(k => sessionStorage.getItem(k)),"
        " Object.keys(localStorage), document.cookie]"
    )


async def test_an_approver_approves_with_a_note_and_the_repeat_call_gets_the_outcome(
    browser: Browser, gateway: Gateway, shopfront: Shopfront
) -> None:
    approval_id = await ask(gateway, shopfront, "inbox")
    async with browser_page(browser) as page:
        icons: list[int] = []  # the page's own icon: no favicon.ico asked for, no 404
        page.on(
            "response",
            lambda answer: (
                icons.append(answer.status) if answer.url.endswith("/favicon.svg") else None
            ),
        )
        await page.goto(gateway.url + "/mcp" + INBOX)
        await expect(page.get_by_role("heading", level=1)).to_have_text("Approvals default/sales")
        await expect(key_input(page)).to_be_focused()
        await page.wait_for_load_state("networkidle")
        assert icons == [200]
        await check_page(page, "inbox-key")
        # From the keyboard alone: the key, then the note and the decision.
        await page.keyboard.type(shopfront.approval_key)
        await page.keyboard.press("Enter")

        pending = card(page, approval_id)
        await expect(pending.get_by_role("heading", name=GATED)).to_be_visible()
        # The arguments, readable: each name beside its value.
        args = pending.locator("dl.args")
        await expect(args.locator("dt")).to_have_text(["item", "request_id"])
        await expect(args.locator("dd")).to_have_text(["sku-inbox", "req-inbox"])
        await expect(pending.locator(".expiry")).to_have_text(re.compile(r"^expires in \d+ h"))
        # Who asked: the agent key, by the prefix the console lists it with.
        await expect(pending.locator(".meta")).to_contain_text(
            f"asked by key {display_prefix(shopfront.agent_key)}"
        )
        await check_page(page, "inbox-pending")
        # Kept in this tab's sessionStorage, nowhere else (the URL neither).
        assert await stored_key(page) == [[shopfront.approval_key], [], ""]
        assert shopfront.approval_key not in page.url

        await pending.get_by_label("Note (optional)").focus()
        await page.keyboard.type(NOTE)
        await page.keyboard.press("Tab")
        await expect(pending.get_by_role("button", name="Approve")).to_be_focused()
        await page.keyboard.press("Enter")
        finished = card(page, approval_id, "recent")
        await expect(finished.locator(".badge")).to_have_text("completed", timeout=20_000)
        await expect(page.locator("#pending-empty")).to_be_visible()
        outcome = finished.locator("dl.outcome")
        await expect(outcome).to_contain_text(NOTE)
        await expect(outcome).to_contain_text(shopfront.approval_key[:13])  # decided_by
        await expect(outcome.locator("pre.json")).to_contain_text('"sku": "sku-1"')
        await check_page(page, "inbox-decided")

    delivered = await sdk_call(gateway, shopfront.agent_key, "inbox")
    assert delivered.is_error is False
    assert delivered.structured_content == LINES["lines"][:1]
    assert delivered.meta["crank/approval_status"] == "completed"
    assert delivered.meta["crank/approval_id"] == approval_id


async def test_a_wrong_key_and_an_agent_key_are_refused_in_words(
    browser: Browser, gateway: Gateway, shopfront: Shopfront
) -> None:
    async with browser_page(browser) as page:
        await page.goto(gateway.url + INBOX)
        problem = page.locator("#key-problem")
        await page.get_by_role("button", name="Open the inbox").click()
        await expect(problem).to_have_text("Paste the approval key first.")

        await enter_key(page, "crk_approval_not_a_real_key")
        await expect(problem).to_have_attribute("data-status", "401")
        await expect(problem).to_have_attribute("data-code", "unauthorized")
        await expect(problem).to_contain_text("did not accept this key")
        await expect(key_input(page)).to_have_attribute("aria-invalid", "true")
        await check_page(page, "inbox-wrong-key")

        await enter_key(page, shopfront.agent_key)
        await expect(problem).to_have_attribute("data-status", "403")
        await expect(problem).to_have_attribute("data-code", "forbidden")
        await expect(page.locator("#inbox")).to_be_hidden()
        assert await stored_key(page) == [[], [], ""]  # a refused key is not kept


async def test_a_linked_approval_is_highlighted_and_a_decided_one_says_so(
    browser: Browser, gateway: Gateway, shopfront: Shopfront
) -> None:
    first = await ask(gateway, shopfront, "linked-1")
    second = await ask(gateway, shopfront, "linked-2")
    async with browser_page(browser) as page:
        await page.goto(f"{gateway.url}{INBOX}#{second}")
        await enter_key(page, shopfront.approval_key)
        linked = card(page, second)
        await expect(linked).to_have_class(re.compile(r"\blinked\b"))
        await expect(linked).to_be_focused()
        await expect(card(page, first)).not_to_have_class(re.compile(r"\blinked\b"))

        # Someone else denies it meanwhile: approving here says it is decided already.
        async with httpx.AsyncClient(base_url=gateway.url, timeout=20) as http:
            await decide(http, shopfront.approval_key, second, "deny")
        await linked.get_by_role("button", name="Approve").click()
        problem = linked.locator(".field-problem")
        await expect(problem).to_have_attribute("data-status", "409")
        await expect(problem).to_have_attribute("data-code", "not_pending")
        await expect(problem).to_contain_text("denied")
        await expect(card(page, second, "recent").locator(".badge")).to_have_text("denied")

        # The key is kept across a reload of the tab; "Forget key" drops it.
        await page.reload()
        await expect(card(page, first)).to_be_visible()
        await page.get_by_role("button", name="Forget key").click()
        await expect(key_input(page)).to_be_visible()
        await expect(page.locator("#pending article")).to_have_count(0)
        assert await stored_key(page) == [[], [], ""]


async def test_a_link_to_an_approval_not_listed_is_read_by_its_id(
    browser: Browser, gateway: Gateway, shopfront: Shopfront
) -> None:
    """A linked approval outside both lists is read on its own; one that is not this
    agent's says so in place."""
    unknown = "approval_" + "0" * 32
    async with browser_page(browser, phone=True) as page:
        await page.goto(f"{gateway.url}{INBOX}#{unknown}")
        await enter_key(page, shopfront.approval_key)
        linked = page.locator("#linked-section")
        await expect(linked).to_be_visible()
        problem = linked.locator(".field-problem")
        await expect(problem).to_have_attribute("data-status", "404")
        await expect(problem).to_have_attribute("data-code", "not_found")
        await expect(page.locator("#pending-empty")).to_be_visible()
        await check_page(page, "inbox-linked-unknown")


async def test_a_page_address_the_gateway_does_not_allow_is_told_on_a_decision(
    browser: Browser, database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> None:
    """A gateway not on a loopback name (here 127.0.0.2, which only its metrics bind;
    granian binds 127.0.0.1) allows no loopback page: without CRANK_PUBLIC_URL the
    page's POSTs (they carry its Origin) are refused; its GETs carry none and list."""
    env = gateway_env(shop, CRANK_HOST="127.0.0.2")
    async with run_gateway(database_url, tmp_path, extra_env=env) as gateway:
        approval_id = await ask(gateway, shopfront, "origin-refused")
        async with browser_page(browser) as page:
            await page.goto(gateway.url + INBOX)
            await enter_key(page, shopfront.approval_key)
            pending = card(page, approval_id)
            await pending.get_by_role("button", name="Deny").click()
            problem = pending.locator(".field-problem")
            await expect(problem).to_have_attribute("data-status", "403")
            await expect(problem).to_contain_text("CRANK_PUBLIC_URL")
            await expect(pending.get_by_role("button", name="Deny")).to_be_enabled()
            assert await stored_key(page) == [[shopfront.approval_key], [], ""]  # kept
