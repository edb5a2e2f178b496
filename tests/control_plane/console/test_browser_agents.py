"""The Agents, API keys and Secrets pages in chromium, as a person uses them: create an
agent, bind its operations, publish it, create a key and copy it, revoke it, store a
secret; axe-core on every page and screenshots at both widths."""

from __future__ import annotations

import re

from playwright.async_api import Browser, Page, expect

from control_plane.cli.client import Client as CliClient
from tests.support.browser import PHONE, browser_page, check_page
from tests.support.cli import Server
from tests.support.console import browser_sign_in
from tests.support.crank_files import rates_operation

WS = "browser-agents"
PUBLISHED_OP = "frankfurter_latest_rate"
DRAFT_OP = "frankfurter_draft_rate"


async def check(page: Page, name: str) -> None:
    """check_page, and nothing wider than a phone's screen at phone width (tables scroll
    in their own box)."""
    await check_page(page, name)
    size = page.viewport_size
    await page.set_viewport_size(PHONE)
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{name} is {width}px wide at phone width"
    if size is not None:
        await page.set_viewport_size(size)


async def test_an_owner_publishes_an_agent_and_creates_copies_and_revokes_its_key(
    browser: Browser, server: Server
) -> None:
    api = CliClient(server.url, server.admin_token)
    api.post("/workspaces", {"slug": WS})
    api.post(f"/workspaces/{WS}/apply", {"operations": [rates_operation()]}, {"publish": "true"})
    api.post(f"/workspaces/{WS}/operations", rates_operation(name=DRAFT_OP))
    base = f"{server.url}/ui/w/{WS}"

    async with browser_page(browser) as page:
        await page.context.grant_permissions(
            ["clipboard-read", "clipboard-write"], origin=server.url
        )
        await browser_sign_in(page, server.url, server.admin_token)
        await page.goto(f"{base}/agents")
        await expect(page.get_by_text("No agents yet")).to_be_visible()
        await check(page, "agents-empty")

        await page.get_by_label("Slug").fill("rates")
        await page.get_by_label("Title").fill("Currency rates")
        await page.get_by_role("button", name="Create agent").click()
        await expect(page).to_have_url(f"{base}/agents/rates?done=created")
        await page.get_by_role("checkbox", name=re.compile(PUBLISHED_OP)).check()
        await page.get_by_role("checkbox", name=re.compile(DRAFT_OP)).check()
        await page.get_by_role("button", name="Save draft").click()
        await expect(page.get_by_text("Draft saved")).to_be_visible()
        await page.get_by_role("button", name="Publish", exact=True).click()
        await expect(page.get_by_role("heading", name="Published as version 1")).to_be_visible()
        warning = page.get_by_role("listitem").filter(has_text="operation_not_published")
        await expect(warning).to_have_count(1)
        await expect(warning).to_contain_text(DRAFT_OP)
        await page.get_by_text("Client configurations").click()
        await expect(page.get_by_role("heading", name="Claude Code")).to_be_visible()
        await check(page, "agent-published")

        await page.goto(f"{base}/keys")
        await check(page, "keys-empty")
        await page.get_by_label("Agent key").check()
        await page.get_by_label("Name (optional)").fill("browser test")
        await page.get_by_role("button", name="Create key").click()
        new_key = page.locator("#new-key")
        await expect(new_key).to_contain_text("crk_agent_")
        key = (await new_key.text_content() or "").strip()
        await page.get_by_role("button", name="Copy key").click()
        await expect(page.get_by_role("button", name="Copied")).to_be_visible()
        assert await page.evaluate("navigator.clipboard.readText()") == key
        await check(page, "key-created")

        await page.goto(f"{base}/keys")
        assert key not in await page.content()  # shown once
        await page.get_by_role("link", name=re.compile(r"^Revoke crk_agent_")).click()
        await expect(page.get_by_role("heading", name="Revoke API key")).to_be_visible()
        await check(page, "key-revoke")
        await page.get_by_role("button", name="Revoke key").click()
        await expect(page.get_by_text("Key revoked")).to_be_visible()
        await expect(page.locator(".badge.error")).to_contain_text("revoked")
        await check(page, "keys-revoked")

        await page.goto(f"{base}/secrets")
        await page.get_by_label("Name").fill("rates_token")
        await page.get_by_label("Value").fill("s3cret-value")
        await page.get_by_role("button", name="Save secret").click()
        await expect(page.get_by_text("Secret stored")).to_be_visible()
        assert "s3cret-value" not in await page.content()
        await check(page, "secrets")
