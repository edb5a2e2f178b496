"""The API docs page in chromium with every address but loopback blocked: Swagger UI
comes from the control plane itself and runs under the page's strict CSP."""

from __future__ import annotations

from urllib.parse import urlsplit

from playwright.async_api import Browser, Route, expect

from tests.support.browser import browser_page
from tests.support.cli import Server


async def test_the_api_docs_page_renders_the_operations_without_internet(
    browser: Browser, server: Server
) -> None:
    elsewhere: list[str] = []

    async def loopback_only(route: Route) -> None:
        if urlsplit(route.request.url).hostname == "127.0.0.1":
            await route.continue_()
        else:
            elsewhere.append(route.request.url)
            await route.abort()

    async with browser_page(browser) as page:
        await page.route("**/*", loopback_only)
        answer = await page.goto(f"{server.url}/api/v1/schema/docs")
        assert answer is not None
        assert answer.status == 200
        policy = answer.headers["content-security-policy"]
        assert "default-src 'none'" in policy
        assert "script-src 'self';" in policy

        await expect(page.locator('[data-path="/api/v1/workspaces"]').first).to_be_visible(
            timeout=20_000  # a large document on a busy machine
        )
        assert await page.locator(".opblock").count() > 20  # every admin route, rendered
        await page.locator('[data-path="/api/v1/workspaces"]').first.click()
        await expect(page.get_by_role("button", name="Try it out").first).to_be_visible()
        icon = await page.locator("link[rel=icon]").get_attribute("href")
        assert icon is not None
        assert (await page.request.get(f"{server.url}{icon}")).status == 200
    assert elsewhere == [], f"the page asked another host: {elsewhere}"
