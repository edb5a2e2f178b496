"""The console's round trips in chromium as a person makes them: every page names an
icon that loads (no favicon.ico 404), a publish ends on a GET so a reload publishes
nothing, the key form keeps the agent just used, and a sign-in link opened again
while its session lives goes home instead of to an error."""

from __future__ import annotations

import re

import pytest
from playwright.async_api import Browser, Response, expect

from control_plane.cli.client import Client as CliClient
from control_plane.console.sessions import sign_in_link_for_token
from shared.crypto import KeyHasher
from shared.db import connect
from tests.support.browser import browser_page
from tests.support.cli import Server
from tests.support.console import browser_sign_in
from tests.support.crank_files import rates_operation
from tests.support.db import TEST_SECRET_KEY

WS = "browser-round-trips"
OPERATION = "frankfurter_latest_rate"


@pytest.fixture(scope="module")
def api(server: Server) -> CliClient:
    """The module's workspace: one published operation, agents first and second."""
    api = CliClient(server.url, server.admin_token)
    api.post("/workspaces", {"slug": WS})
    api.post(f"/workspaces/{WS}/apply", {"operations": [rates_operation()]}, {"publish": "true"})
    for slug in ("first", "second"):
        api.post(f"/workspaces/{WS}/agents", {"slug": slug, "operations": [OPERATION]})
    return api


async def test_console_pages_name_an_icon_that_loads(browser: Browser, server: Server) -> None:
    async with browser_page(browser) as page:
        answers: list[Response] = []
        page.on("response", lambda answer: answers.append(answer))
        await page.goto(f"{server.url}/ui/sign-in")
        await browser_sign_in(page, server.url, server.admin_token)
        await page.goto(f"{server.url}/ui/")
        await page.wait_for_load_state("networkidle")
        icons = [a for a in answers if a.url == f"{server.url}/ui/static/favicon.svg"]
        assert icons, "no page asked for the console's icon"
        assert all(a.status == 200 for a in icons)
        assert icons[0].headers["content-type"].startswith("image/svg+xml")
        assert [a.url for a in answers if a.status == 404] == []


async def test_a_publish_ends_on_a_get_so_a_reload_publishes_nothing(
    browser: Browser, server: Server, api: CliClient
) -> None:
    agent_url = f"{server.url}/ui/w/{WS}/agents/first"
    async with browser_page(browser) as page:
        await browser_sign_in(page, server.url, server.admin_token)
        await page.goto(agent_url)
        await page.get_by_role("button", name="Publish", exact=True).click()
        await expect(page).to_have_url(f"{agent_url}?done=published")
        await expect(page.get_by_role("heading", name="Published as version 1")).to_be_visible()

        await page.reload()  # a GET: no form is sent again
        await expect(page.get_by_role("heading", name="Published as version 1")).to_be_visible()
        assert api.get(f"/workspaces/{WS}/agents/first")["published_version"] == 1

        await page.get_by_role("button", name="Publish", exact=True).click()
        await expect(page).to_have_url(f"{agent_url}?done=unchanged")
        await expect(
            page.get_by_role("heading", name=re.compile("Nothing to publish"))
        ).to_be_visible()


@pytest.mark.usefixtures("api")
async def test_the_key_form_keeps_the_agent_a_key_was_just_created_for(
    browser: Browser, server: Server
) -> None:
    async with browser_page(browser) as page:
        await browser_sign_in(page, server.url, server.admin_token)
        await page.goto(f"{server.url}/ui/w/{WS}/keys")
        await page.get_by_label("Agent", exact=True).select_option("second")
        await page.get_by_role("radio", name="Approval key").check()
        await page.get_by_role("button", name="Create key").click()
        await expect(page.locator("#new-key")).to_contain_text("crk_approval_")
        await expect(page.get_by_label("Agent", exact=True)).to_have_value("second")
        await expect(page.get_by_role("radio", name="Approval key")).to_be_checked()


async def test_a_sign_in_link_opened_again_while_signed_in_goes_home(
    browser: Browser, server: Server
) -> None:
    async with await connect(server.database_url) as conn:
        code = await sign_in_link_for_token(conn, KeyHasher(TEST_SECRET_KEY), server.admin_token)
        await conn.commit()
    assert code is not None
    link = f"{server.url}/ui/sign-in/link?code={code}"
    async with browser_page(browser) as page:
        await page.goto(link)
        await expect(page).to_have_url(re.compile(r".*/ui/(w/[^/]+)?$"))
        await page.goto(link)  # used up, but this browser's session is still valid
        await expect(page).to_have_url(re.compile(r".*/ui/(w/[^/]+)?$"))
        await expect(page.get_by_text("already used or has expired")).to_have_count(0)

        await page.context.clear_cookies()  # without a session the error still shows
        answer = await page.goto(link)
        assert answer is not None
        assert answer.status == 401
        await expect(page.get_by_text("already used or has expired")).to_be_visible()
