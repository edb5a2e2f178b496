"""The approvals, call log and audit log pages in chromium: filters sent by htmx (the URL
follows), an owner's decision, axe-core and screenshots at both widths on each page."""

from __future__ import annotations

import re

import httpx
from playwright.async_api import Browser, expect

from tests.support.approvals import insert_pending, publish_shop
from tests.support.browser import browser_page, check_page
from tests.support.call_log import seed_calls
from tests.support.cli import Server
from tests.support.console import browser_sign_in


async def test_an_owner_filters_approvals_decides_one_and_reads_both_logs(
    browser: Browser, server: Server
) -> None:
    async with httpx.AsyncClient(base_url=server.url) as api:
        await publish_shop(api, server.admin_token, 9)  # workspace default, agent sales
    waiting = await insert_pending(server.database_url, 3)
    await seed_calls(server.database_url, 4)
    await seed_calls(server.database_url, 2, outcome="upstream_unavailable")
    base = f"{server.url}/ui/w/default"

    async with browser_page(browser) as page:
        await browser_sign_in(page, server.url, server.admin_token)

        await page.goto(f"{base}/approvals")
        await page.get_by_label("Status").select_option("pending")
        await page.get_by_label("Agent").fill("sales")
        await page.get_by_role("button", name="Filter").click()
        await expect(page).to_have_url(re.compile(r"/approvals\?status=pending&agent=sales$"))
        await expect(page.get_by_role("link", name=waiting[0])).to_be_visible()
        await check_page(page, "approvals")

        await page.get_by_role("link", name=waiting[0]).click()
        await expect(page.get_by_role("heading", name="Arguments")).to_be_visible()
        await check_page(page, "approval")
        await page.get_by_label("Note").fill("checked the order")
        await page.get_by_role("button", name="Approve").click()
        await expect(page.locator(".facts")).to_contain_text("approved")
        await expect(page.locator(".facts")).to_contain_text("checked the order")
        await expect(page.get_by_role("button", name="Approve")).to_have_count(0)

        # check_page comes after a page's htmx swaps: axe-core leaves style attributes
        # that htmx's settling would copy onto the swapped-in elements of the same id.
        await page.goto(f"{base}/calls")
        await page.get_by_label("Request id").fill("not-a-request-id")
        await page.get_by_role("button", name="Filter").click()
        await expect(page.locator("#f-request_id-error")).to_be_visible()
        await expect(page.get_by_label("Request id")).to_have_attribute("aria-invalid", "true")
        await page.get_by_label("Request id").fill("")
        await page.get_by_label("Outcome").select_option("upstream_unavailable")
        await page.get_by_role("button", name="Filter").click()
        await expect(page).to_have_url(re.compile(r"/calls\?outcome=upstream_unavailable$"))
        await expect(page.locator("tbody tr")).to_have_count(2)
        await check_page(page, "calls")

        await page.goto(f"{base}/audit")
        await page.get_by_label("Action").fill("approval")
        await page.get_by_role("button", name="Filter").click()
        await expect(page).to_have_url(re.compile(r"/audit\?action=approval$"))
        await expect(page.locator("tbody tr")).to_have_count(1)
        await page.go_back()  # the pushed URL is history: back is the unfiltered log
        await expect(page).to_have_url(f"{base}/audit")
        await expect(page.get_by_label("Action")).to_have_value("")
        await page.goto(f"{base}/audit?action=approval")  # and a link that works without htmx
        await expect(page.locator("tbody tr")).to_have_count(1)
        await expect(page.locator("tbody")).to_contain_text("approval.approved")
        await expect(page.locator("tbody")).to_contain_text("checked the order")
        await check_page(page, "audit")
