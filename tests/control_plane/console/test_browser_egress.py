"""The Egress page in chromium, from a refused try-it to a working one, no curl and no
restart: the try-it says what to change, an owner adds the host, an instance admin
grants the private address, and the try-it then reaches the loopback upstream the
test started (allowlisted by the operator, ``egress_server``). axe-core and
screenshots at both widths."""

from __future__ import annotations

import httpx
from playwright.async_api import Browser, Page, expect

from control_plane.cli.client import Client as CliClient
from tests.support.api import make_token
from tests.support.browser import browser_page, check_page
from tests.support.cli import Server
from tests.support.console import browser_sign_in
from tests.support.threaded_http import ThreadedServer

WS = "egress"


def workspace_narrowed_to_another_host(server: Server, port: int) -> None:
    """A workspace whose owners listed one public host, with a draft that calls loopback."""
    admin = CliClient(server.url, server.admin_token)
    admin.post("/workspaces", {"slug": WS})
    admin.post(
        f"/workspaces/{WS}/operations",
        {
            "name": "read_data",
            "description": "Reads the data. Use when the user asks for the data.",
            "input": {"type": "object", "properties": {}},
            "request": {"method": "GET", "url": f"http://127.0.0.1:{port}/data"},
            "response": {"select": "@"},
        },
    )
    base = f"{server.url}/api/v1/workspaces/{WS}/egress"
    bearer = {"Authorization": f"Bearer {server.admin_token}"}
    etag = httpx.get(base, headers=bearer).headers["etag"]
    narrowed = httpx.put(
        f"{base}/hosts", json={"hosts": ["api.example.com"]}, headers={**bearer, "If-Match": etag}
    )
    assert narrowed.status_code == 200, narrowed.text


async def try_it(page: Page, base_url: str) -> None:
    await page.goto(f"{base_url}/ui/w/{WS}/operations/read_data/edit/response")
    await page.get_by_role("button", name="Try it").click()


async def test_an_owner_and_an_instance_admin_open_a_loopback_upstream_from_the_console(
    browser: Browser, egress_server: Server, upstream: ThreadedServer
) -> None:
    server = egress_server
    workspace_narrowed_to_another_host(server, upstream.port)
    owner_token = await make_token(server.database_url, "owner", WS, name="olga")
    remedy = "p.message.warning[role=alert]"
    egress_link = f"/ui/w/{WS}/egress"
    async with browser_page(browser) as owner:
        await browser_sign_in(owner, server.url, owner_token)
        await try_it(owner, server.url)
        await expect(owner.locator(remedy)).to_contain_text(
            "127.0.0.1 is not on this workspace's host list. A workspace owner adds "
            f"127.0.0.1 under Hosts on the Egress page ({egress_link})."
        )
        await expect(owner.locator("pre.selected")).to_contain_text(
            "Tell the user that the administrator must allow this upstream."
        )
        await owner.get_by_role("link", name="Open the Egress page").click()
        await expect(owner.get_by_role("heading", name="Egress", exact=True)).to_be_visible()
        await check_page(owner, "egress-owner")
        await expect(owner.get_by_label("Granted private destinations")).to_have_count(0)
        await owner.get_by_label("Only these hosts").fill("api.example.com\n127.0.0.1")
        await owner.get_by_role("button", name="Save hosts").click()
        await expect(owner.locator("#messages")).to_contain_text("Host list saved")
        await expect(owner.locator("main")).to_contain_text("Only: api.example.com, 127.0.0.1.")

        await try_it(owner, server.url)
        grant = f"127.0.0.1:{upstream.port}"
        await expect(owner.locator(remedy)).to_contain_text(
            f"{grant} is a private address (loopback). This workspace reaches it only once "
            f"an instance admin grants {grant} on the Egress page ({egress_link})"
        )
        assert upstream.hits == []

        async with browser_page(browser) as admin:
            await browser_sign_in(admin, server.url, server.admin_token)
            await try_it(admin, server.url)
            await expect(admin.locator(remedy)).to_contain_text(
                f"{grant} is a private address (loopback) the operator allows, but this "
                f"workspace has no grant for it. An instance admin adds the grant {grant} "
                f"under Grants on the Egress page ({egress_link})."
            )
            await admin.get_by_role("link", name="Open the Egress page").click()
            await expect(admin.locator("#operator-settings")).to_contain_text(
                f"CRANK_UPSTREAM_ALLOWLIST: {grant}."
            )
            await admin.get_by_label("Granted private destinations").fill(grant)
            await admin.get_by_role("button", name="Save grants").click()
            await expect(admin.locator("#messages")).to_contain_text("Grants saved")
            await expect(admin.get_by_role("cell", name=grant)).to_be_visible()
            await check_page(admin, "egress-instance-admin")

        await try_it(owner, server.url)
        await expect(owner.locator("pre.selected")).to_contain_text('"path": "/data"')
        await expect(owner.locator(remedy)).to_have_count(0)
    assert upstream.hits == ["GET /data"]
