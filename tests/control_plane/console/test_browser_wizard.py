"""The operation wizard in chromium: an operation built step by step against a loopback
upstream, its selection previewed through try-it, published; axe-core and screenshots
at both widths on every step."""

from __future__ import annotations

import json

import httpx
from playwright.async_api import Browser, expect

from control_plane.cli.client import Client as CliClient
from shared.engine.spec import operation_from_builtins
from shared.engine.tool_definition import tool_definitions
from tests.support.browser import browser_page, check_page
from tests.support.cli import Server
from tests.support.console import browser_sign_in
from tests.support.threaded_http import ThreadedServer

WS = "wizard"


def grant_loopback(server: Server, port: int) -> None:
    """The instance admin grants the workspace the upstream the operator allowlisted."""
    base = f"{server.url}/api/v1/workspaces/{WS}/egress"
    bearer = {"Authorization": f"Bearer {server.admin_token}"}
    current = httpx.get(base, headers=bearer)
    assert current.status_code == 200, current.text
    granted = httpx.put(
        f"{base}/grants",
        json={"grants": [f"127.0.0.1:{port}"]},
        headers={**bearer, "If-Match": current.headers["etag"]},
    )
    assert granted.status_code == 200, granted.text


async def test_an_editor_builds_tries_and_publishes_an_operation_in_the_wizard(
    browser: Browser, egress_server: Server, upstream: ThreadedServer
) -> None:
    server = egress_server
    admin = CliClient(server.url, server.admin_token)
    admin.post("/workspaces", {"slug": WS})
    grant_loopback(server, upstream.port)
    async with browser_page(browser) as page:
        await browser_sign_in(page, server.url, server.admin_token)
        await page.goto(f"{server.url}/ui/w/{WS}/operations/new")
        await expect(page.get_by_role("heading", name="New operation")).to_be_visible()
        await check_page(page, "wizard-request")
        await page.get_by_label("Name", exact=True).fill("get order")
        await page.get_by_role("button", name="Create draft and continue").click()
        name_field = page.get_by_label("Name", exact=True)
        await expect(name_field).to_have_attribute("aria-invalid", "true")
        await expect(page.locator('[data-field="description"]')).to_be_visible()
        await check_page(page, "wizard-request-errors")
        await name_field.fill("get_order")
        await page.get_by_label("Description").fill(
            "Reads one order by its id. Use when the user asks about an order."
        )
        await page.get_by_label("URL template").fill(
            f"http://127.0.0.1:{upstream.port}/orders/{{order_id}}"
        )
        await page.get_by_role("button", name="Create draft and continue").click()

        await expect(page.get_by_role("heading", name="Parameters")).to_be_visible()
        await expect(page.locator("#path-variables")).to_contain_text("order_id")
        await page.get_by_role("button", name="Add parameter").click()  # htmx: no reload
        await expect(page.locator("fieldset.param")).to_have_count(2)
        await expect(page.locator("fieldset.param").nth(1).get_by_label("Name")).to_be_focused()
        await check_page(page, "wizard-parameters")
        await page.get_by_role("button", name="Remove parameter 2").click()
        await expect(page.locator("fieldset.param")).to_have_count(1)
        await (
            page.locator("fieldset.param")
            .get_by_label("Description")
            .fill("The order's number, e.g. A-7.")
        )
        await page.get_by_role("button", name="Save and continue").click()

        await expect(page.get_by_role("heading", name="Response")).to_be_visible()
        await page.get_by_label("Example arguments (JSON)").fill('{"order_id": "A-7"}')
        await page.get_by_label("Select (JMESPath)").fill("path[")
        await page.get_by_role("button", name="Try it").click()
        await expect(page.locator("#select-error")).to_contain_text("JMESPath does not compile")
        await page.get_by_label("Select (JMESPath)").fill("path")
        await page.get_by_role("button", name="Try it").click()
        await expect(page.locator("pre.selected")).to_have_text('"/orders/A-7"')
        await expect(page.locator("pre.raw")).to_contain_text('"method": "GET"')
        await expect(page.locator("#select-error")).to_have_text("")
        assert upstream.hits == ["GET /orders/A-7"]
        await check_page(page, "wizard-response")
        await page.get_by_role("button", name="Save and continue").click()

        await expect(page.get_by_role("heading", name="Safety")).to_be_visible()
        await check_page(page, "wizard-safety")
        await page.get_by_label("Retries").fill("1")
        await page.get_by_label("Retries").press("Enter")  # Enter saves and continues

        await expect(page.get_by_role("heading", name="Review and publish")).to_be_visible()
        # What the model will see, and what a call does, before anything is published.
        await expect(page.get_by_role("heading", name="What the model will see")).to_be_visible()
        shown_tool = json.loads(await page.locator("pre.tool-definition").inner_text())
        summary = page.locator("dl.summary")
        await expect(summary).to_contain_text(
            f"GET http://127.0.0.1:{upstream.port}/orders/{{order_id}}"
        )
        await expect(summary.locator("dd").last).to_have_text("path")
        await check_page(page, "wizard-review")
        await page.get_by_role("button", name="Publish").click()
        await expect(page.get_by_role("alert")).to_contain_text("Published version 1.")

    stored = admin.get(f"/workspaces/{WS}/operations/get_order")
    assert stored["latest_version"] == 1
    assert stored["draft"]["response"]["select"] == "path"
    assert stored["draft"]["execution_config"]["retries"] == 1
    assert stored["draft"]["input"]["properties"]["order_id"]["description"] == (
        "The order's number, e.g. A-7."
    )
    assert stored["draft"]["execution_config"]["timeout_ms"] == 10000  # the default, kept
    # The tool the review showed is the one tools/list serves for the published version.
    assert shown_tool == tool_definitions(operation_from_builtins(stored["draft"]))[1]
    assert shown_tool["name"] == "get_order"
    assert shown_tool["inputSchema"]["properties"]["order_id"]["description"] == (
        "The order's number, e.g. A-7."
    )
