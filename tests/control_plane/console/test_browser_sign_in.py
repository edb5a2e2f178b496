"""Signing in and out in chromium, with axe-core on every page and screenshots at both widths."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from control_plane.cli.client import Client as CliClient
from tests.support.browser import browser_page, check_page
from tests.support.cli import Server
from tests.support.console import browser_sign_in


async def test_an_admin_signs_in_sees_the_overview_and_signs_out(
    browser: Browser, server: Server
) -> None:
    for slug in ("browser-home", "browser-other"):  # with one, the console opens it at once
        CliClient(server.url, server.admin_token).post("/workspaces", {"slug": slug})
    async with browser_page(browser) as page:
        await page.goto(f"{server.url}/ui/w/browser-home")
        await expect(page).to_have_url(f"{server.url}/ui/sign-in?next=/ui/w/browser-home")
        await check_page(page, "sign-in")
        await page.get_by_label("Admin token").fill("crk_admin_wrong")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_role("alert")).to_contain_text("not a valid admin token")

        await browser_sign_in(page, server.url, server.admin_token)
        await page.goto(f"{server.url}/ui/")
        await expect(page.get_by_role("heading", name="Workspaces")).to_be_visible()
        await check_page(page, "workspaces")
        await page.get_by_role("link", name="browser-home").first.click()
        await expect(page.get_by_role("heading", name="Calls in the last hour")).to_be_visible()
        await check_page(page, "overview")

        await page.get_by_role("button", name="Sign out").click()
        await expect(page).to_have_url(f"{server.url}/ui/sign-in")
        await page.goto(f"{server.url}/ui/w/browser-home")
        await expect(page.get_by_label("Admin token")).to_be_visible()  # signed out for real
