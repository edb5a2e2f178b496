"""The Identity providers page in chromium, as an owner and a viewer use it: add a
provider (a plain-http issuer refused beside its field first), edit it, let an agent
accept its tokens from the agent's page, see the delete refused while the agent names
it, and a viewer who reads everything and can change nothing. axe-core and
screenshots at both widths on every page checked."""

from __future__ import annotations

import re

from playwright.async_api import Browser, expect

from control_plane.cli.client import Client as CliClient
from tests.support.api import make_token
from tests.support.browser import browser_page, check_page
from tests.support.cli import Server
from tests.support.console import browser_sign_in

WS = "browser-idp"
ISSUER = "https://id.example.com/realms/staff"


async def test_an_owner_manages_a_provider_and_a_viewer_only_reads_it(
    browser: Browser, server: Server
) -> None:
    CliClient(server.url, server.admin_token).post("/workspaces", {"slug": WS})
    owner_token = await make_token(server.database_url, "owner", WS, name="olga")
    viewer_token = await make_token(server.database_url, "viewer", WS, name="vera")
    base = f"{server.url}/ui/w/{WS}"

    async with browser_page(browser) as page:
        await browser_sign_in(page, server.url, owner_token)
        await page.goto(base)
        await (
            page.get_by_role("navigation", name="Workspace sections")
            .get_by_role("link", name="Identity providers")
            .click()
        )
        await expect(page.get_by_role("heading", name="Identity providers")).to_be_visible()
        await expect(page.get_by_text("No identity providers")).to_be_visible()

        # A plain-http issuer off this machine: refused beside its field, what was typed kept.
        await page.get_by_label("Name", exact=True).fill("corp")
        await page.get_by_label("Issuer", exact=True).fill("http://id.example.com")
        await page.get_by_role("button", name="Add provider").click()
        issuer = page.get_by_label("Issuer", exact=True)
        await expect(issuer).to_have_attribute("aria-invalid", "true")
        await expect(page.locator("#issuer-error")).to_contain_text("https required")
        await expect(issuer).to_have_value("http://id.example.com")
        await check_page(page, "identity-providers-refused")

        await issuer.fill(ISSUER)
        await page.get_by_label("Groups claim (optional)").fill("groups")
        await page.get_by_role("button", name="Add provider").click()
        await expect(page.locator("#messages")).to_contain_text("Identity provider added")
        row = page.get_by_role("row").filter(has_text=ISSUER)
        await expect(row).to_contain_text("groups")
        await expect(row).to_contain_text("none")  # no agent names it yet
        await check_page(page, "identity-providers")

        await row.get_by_role("link", name="corp").click()
        await expect(page.get_by_role("heading", name="Identity provider corp")).to_be_visible()
        await page.get_by_role("checkbox", name="ES512").check()
        await page.get_by_role("checkbox", name="JWT", exact=True).check()
        await page.get_by_label("Clock leeway (seconds)").fill("60")
        await page.get_by_role("button", name="Save provider").click()
        await expect(page.locator("#messages")).to_contain_text("Identity provider saved")
        facts = page.locator("dl.facts")
        await expect(facts).to_contain_text("ES512")
        await expect(facts).to_contain_text("at+jwt, JWT")
        await expect(facts).to_contain_text("60 s")
        await check_page(page, "identity-provider")

        # An agent that accepts corp's tokens, chosen on the agent's page.
        await page.goto(f"{base}/agents")
        await page.get_by_label("Slug").fill("sales")
        await page.get_by_role("button", name="Create agent").click()
        await page.get_by_role("checkbox", name=re.compile(r"^corp")).check()
        await page.get_by_label("Scopes every caller's token must hold").fill("crm.read, crm.write")
        await page.get_by_role("button", name="Save draft").click()
        await expect(page.get_by_text("Draft saved")).to_be_visible()
        await expect(page.get_by_role("checkbox", name=re.compile(r"^corp"))).to_be_checked()
        await expect(page.get_by_label("Scopes every caller's token must hold")).to_have_value(
            "crm.read crm.write"
        )
        await check_page(page, "agent-auth")

        # While sales names corp, the delete is refused with the API's words.
        await page.goto(f"{base}/identity-providers/corp")
        await expect(page.locator("#naming-agents")).to_have_text("sales")
        await page.get_by_role("link", name="Delete corp").click()
        await expect(page.get_by_role("heading", name="Delete identity provider")).to_be_visible()
        await page.get_by_role("button", name="Delete provider").click()
        await expect(page.get_by_role("alert")).to_contain_text(
            "identity provider 'corp' is named by agents sales; "
            "remove it from their auth.providers first"
        )
        await expect(page.get_by_role("heading", name="Identity provider corp")).to_be_visible()

    async with browser_page(browser) as viewer:
        await browser_sign_in(viewer, server.url, viewer_token)
        await viewer.goto(f"{base}/identity-providers")
        await expect(viewer.get_by_role("cell", name="sales")).to_be_visible()
        await expect(viewer.get_by_role("button", name="Add provider")).to_have_count(0)
        await viewer.get_by_role("link", name="corp", exact=True).click()
        await expect(viewer.locator("dl.facts")).to_contain_text("ES512")
        await expect(viewer.get_by_role("button", name="Save provider")).to_have_count(0)
        await expect(viewer.get_by_role("link", name="Delete corp")).to_have_count(0)
        await expect(viewer.get_by_text("Only the workspace's owners change")).to_be_visible()
        await check_page(viewer, "identity-provider-viewer")
        await viewer.goto(f"{base}/agents/sales")
        await expect(viewer.get_by_role("checkbox", name=re.compile(r"^corp"))).to_be_disabled()
        # Asking to delete is an owner's page: the viewer is refused it.
        answer = await viewer.goto(f"{base}/identity-providers/corp/delete")
        assert answer is not None
        assert answer.status == 403
