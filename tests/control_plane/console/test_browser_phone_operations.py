"""The operations list on a phone (390 px) in chromium: every row fits the screen, the
lint column included, and no operation name is broken in the middle."""

from __future__ import annotations

from playwright.async_api import Browser, expect

from control_plane.cli.client import Client as CliClient
from tests.support.browser import PHONE, browser_page, check_page
from tests.support.cli import Server
from tests.support.console import browser_sign_in
from tests.support.crank_files import rates_operation

WS = "phone-operations"
NAMES = ("frankfurter_latest_rate", "frankfurter_historical_rate_for_a_date")
LONG_URL = "https://api.frankfurter.dev/v1/historical/rates/by-date/latest-known/with-a-long-path"


async def test_the_operations_list_fits_a_phone_lint_column_included(
    browser: Browser, server: Server
) -> None:
    api = CliClient(server.url, server.admin_token)
    api.post("/workspaces", {"slug": WS})
    operations = [
        rates_operation(),
        rates_operation(name=NAMES[1], request={"method": "GET", "url": LONG_URL}),
    ]
    api.post(f"/workspaces/{WS}/apply", {"operations": operations}, {"publish": "true"})

    async with browser_page(browser, phone=True) as page:
        await browser_sign_in(page, server.url, server.admin_token)
        await page.goto(f"{server.url}/ui/w/{WS}/operations")
        rows = page.locator("table.operations tbody tr")
        await expect(rows).to_have_count(len(NAMES))
        assert await page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        for index in range(len(NAMES)):
            row = rows.nth(index)
            lint = row.locator("td").last  # the Lint column
            await expect(lint).to_be_visible()
            await expect(lint).to_contain_text("clean")
            box = await lint.bounding_box()
            assert box is not None
            assert box["x"] >= 0
            assert box["x"] + box["width"] <= PHONE["width"], f"row {index}: lint off-screen"
            # An inline element broken across lines has one client rect per line.
            name = row.locator("td").first.locator("code")
            lines = await name.evaluate("element => element.getClientRects().length")
            assert lines == 1, f"{await name.text_content()} is broken over {lines} lines"
        await check_page(page, "operations-phone")
