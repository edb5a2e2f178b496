"""The Operations pages in chromium: list and filter, one operation, a diff of two
versions, a rollback, a stale write; axe-core and screenshots at both widths on every
page."""

from __future__ import annotations

import re

import httpx
from playwright.async_api import Browser, expect

from tests.support.api import auth
from tests.support.browser import browser_page, check_page
from tests.support.cli import Server
from tests.support.console import browser_sign_in
from tests.support.operations import (
    create_operation,
    order_spec,
    publish_draft,
    read_operation,
    replace_draft,
)

WS = "browser-ops"


async def seed(server: Server) -> None:
    """``get_order`` at versions 1 and 2 with a draft ahead of them, and a draft only one."""
    async with httpx.AsyncClient(base_url=server.url) as api:
        created = await api.post(
            "/api/v1/workspaces", json={"slug": WS}, headers=auth(server.admin_token)
        )
        assert created.status_code == 201, created.text
        token = server.admin_token
        await create_operation(api, token, WS, order_spec())
        await publish_draft(api, token, WS, "get_order")
        await replace_draft(api, token, WS, order_spec(title="Order by id"))
        await publish_draft(api, token, WS, "get_order")
        moved = order_spec(title="Order by id")
        moved["request"]["url"] = "https://api.example.com/v2/orders/{order_id}"
        await replace_draft(api, token, WS, moved)
        await create_operation(api, token, WS, order_spec("list_orders", title="List orders"))


async def test_an_editor_filters_opens_compares_and_rolls_back_and_a_stale_write_is_refused(
    browser: Browser, server: Server
) -> None:
    await seed(server)
    async with browser_page(browser) as page:
        await browser_sign_in(page, server.url, server.admin_token)
        await page.goto(f"{server.url}/ui/w/{WS}/operations")
        await expect(page.get_by_role("heading", name="Operations")).to_be_visible()
        await expect(page.get_by_text("draft ahead of v2", exact=True)).to_be_visible()
        await expect(page.get_by_text("draft only", exact=True)).to_be_visible()
        await check_page(page, "operations-list")

        await page.get_by_label("State").select_option("ahead")  # htmx swaps the results
        await expect(page).to_have_url(re.compile(r"state=ahead"))
        await expect(page.get_by_role("link", name="list_orders")).to_have_count(0)
        await page.get_by_label("Name or title contains").fill("order by")
        await expect(page).to_have_url(re.compile(r"q=order(%20|\+)by"))
        await expect(page.get_by_role("link", name="get_order")).to_be_visible()
        await check_page(page, "operations-list-filtered")

        await page.get_by_role("link", name="get_order").click()
        await expect(page.get_by_role("heading", name="get_order")).to_be_visible()
        await expect(page.get_by_text("From version 2 to the draft: 1 change.")).to_be_visible()
        await check_page(page, "operation-detail")

        await page.get_by_label("From").select_option("1")
        await page.get_by_label("To").select_option("2")
        await page.get_by_role("button", name="Compare").click()
        await expect(page.get_by_text("From version 1 to version 2: 1 change.")).to_be_visible()
        await expect(page).to_have_url(re.compile(r"before=1&after=2"))
        await check_page(page, "operation-diff")

        await page.get_by_role("button", name="Roll back to v1").click()
        await expect(page.get_by_text("Rolled back: version 3 is published")).to_be_visible()
        await expect(page.get_by_text("published v3", exact=True)).to_be_visible()
        await check_page(page, "operation-rolled-back")

        async with httpx.AsyncClient(base_url=server.url) as api:  # someone else, meanwhile
            await replace_draft(api, server.admin_token, WS, order_spec(title="Someone else's"))
        await page.get_by_role("button", name="Roll back to v2").click()
        await expect(page.get_by_role("heading", name="Changed by someone else")).to_be_visible()
        await check_page(page, "operation-changed-by-someone-else")
        await page.get_by_role("link", name="Reload the operation").click()
        await expect(page.get_by_text("draft ahead of v3", exact=True)).to_be_visible()
        await expect(page.get_by_text("Someone else's", exact=True)).to_be_visible()

    async with httpx.AsyncClient(base_url=server.url) as api:
        operation = await read_operation(api, server.admin_token, WS, "get_order")
    assert operation["latest_version"] == 3  # the stale rollback published nothing
    assert operation["draft"]["title"] == "Someone else's"
