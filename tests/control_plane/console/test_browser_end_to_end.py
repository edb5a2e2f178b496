"""The whole console flow in chromium, as a person does it, against real processes: a
control plane under granian and an MCP gateway process on one database, a JSON upstream
on loopback. An owner signs in, builds two operations in the wizard (one behind a
person's approval), publishes an agent serving both, creates its keys; the official MCP
SDK calls the tools through the gateway; the call shows in the call log, the approval
is decided in the gateway's approver inbox, the revoked key is refused; a viewer of the
workspace sees no write control and a forged write is refused. axe-core and screenshots
at both widths on every page seen (tests/support/browser.py)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from playwright.async_api import Browser, Locator, Page, expect

from control_plane.cli.client import Client as CliClient
from mcp_gateway.vocabulary.jsonrpc import REFUSED
from shared.keys import display_prefix
from tests.support.api import grant_egress, make_token
from tests.support.browser import browser_page, check_page
from tests.support.cli import Server
from tests.support.console import browser_sign_in
from tests.support.gateway import Gateway, run_gateway
from tests.support.threaded_http import ThreadedServer

WS = "e2e"
AGENT = "orders"
READ_TOOL = "get_order"
GATED_TOOL = "refund_order"
ORDER = {"order_id": "A-7"}


@asynccontextmanager
async def gateway_for(
    server: Server, upstream: ThreadedServer, tmp_path: Path
) -> AsyncIterator[Gateway]:
    """An MCP gateway process on the control plane's database, allowed to call the
    upstream, its call log flushed within 100 ms. Its periodic refresh stays at the
    default five seconds, so the revoked key refused right after the revocation is
    the gateway told of it (LISTEN/NOTIFY), not polling."""
    env = {
        "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream.port}",
        "CRANK_CALL_LOG_FLUSH_MS": "100",
        "CRANK_RATE_LIMIT": "off",
    }
    async with run_gateway(server.database_url, tmp_path, extra_env=env) as gw:
        yield gw


async def call_tool(url: str, key: str, tool: str, statuses: list[int] | None = None) -> Any:
    """tools/call through the official MCP SDK's streamable HTTP client; the HTTP
    statuses the gateway answered go to ``statuses``."""

    async def seen(response: httpx2.Response) -> None:
        if statuses is not None:
            statuses.append(response.status_code)

    bearer = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=bearer, event_hooks={"response": [seen]}) as http:
        transport = streamable_http_client(url, http_client=http)
        async with McpClient(transport, mode="auto") as mcp:
            return await mcp.call_tool(tool, ORDER)


# --- the owner's pages ---------------------------------------------------------------


async def build_read_operation(page: Page, base: str, port: int) -> None:
    """A GET operation, its selection previewed with try-it, published."""
    await page.goto(f"{base}/operations")
    await check_page(page, "e2e-operations-empty")
    await page.get_by_role("link", name="New operation").click()
    await expect(page.get_by_role("heading", name="New operation")).to_be_visible()
    await check_page(page, "e2e-wizard-request")
    await page.get_by_label("Name", exact=True).fill(READ_TOOL)
    await page.get_by_label("Description").fill(
        "Reads one order by its id. Use when the user asks about an order."
    )
    await page.get_by_label("URL template").fill(f"http://127.0.0.1:{port}/orders/{{order_id}}")
    await page.get_by_role("button", name="Create draft and continue").click()

    await expect(page.get_by_role("heading", name="Parameters")).to_be_visible()
    await check_page(page, "e2e-wizard-parameters")
    await describe_order_id(page)

    await expect(page.get_by_role("heading", name="Response")).to_be_visible()
    await page.get_by_label("Example arguments (JSON)").fill('{"order_id": "A-7"}')
    await page.get_by_label("Select (JMESPath)").fill("path")
    await page.get_by_role("button", name="Try it").click()
    await expect(page.locator("pre.selected")).to_have_text('"/orders/A-7"')
    await expect(page.locator("pre.raw")).to_contain_text('"method": "GET"')
    await check_page(page, "e2e-wizard-response")
    await page.get_by_role("button", name="Save and continue").click()

    await expect(page.get_by_role("heading", name="Safety")).to_be_visible()
    await check_page(page, "e2e-wizard-safety")
    await page.get_by_role("button", name="Save and continue").click()
    await publish_in_review(page, "e2e-wizard-review")


async def build_gated_operation(page: Page, base: str, port: int) -> None:
    """A POST operation that needs a person's approval before each call, published."""
    await page.goto(f"{base}/operations/new")
    await page.get_by_label("Name", exact=True).fill(GATED_TOOL)
    await page.get_by_label("Description").fill(
        "Refunds one order in full. Use when the user asks to refund an order."
    )
    await page.get_by_label("Method").select_option("POST")
    await page.get_by_label("URL template").fill(
        f"http://127.0.0.1:{port}/orders/{{order_id}}/refund"
    )
    await page.get_by_role("button", name="Create draft and continue").click()
    await expect(page.get_by_role("heading", name="Parameters")).to_be_visible()
    await describe_order_id(page)
    await expect(page.get_by_role("heading", name="Response")).to_be_visible()
    await page.get_by_role("button", name="Save and continue").click()

    await expect(page.get_by_role("heading", name="Safety")).to_be_visible()
    await page.get_by_label("Needs a person's approval before each call").check()
    await check_page(page, "e2e-wizard-safety-approval")
    await page.get_by_role("button", name="Save and continue").click()
    await publish_in_review(page, "e2e-wizard-review-approval")


async def describe_order_id(page: Page) -> None:
    """The parameters step: the URL's path variable, described, saved."""
    await expect(page.locator("#path-variables")).to_contain_text("order_id")
    params = page.locator("fieldset.param")
    await expect(params).to_have_count(1)
    await params.get_by_label("Description").fill("The order's number, e.g. A-7.")
    await page.get_by_role("button", name="Save and continue").click()


async def publish_in_review(page: Page, screen: str) -> None:
    await expect(page.get_by_role("heading", name="Review and publish")).to_be_visible()
    await check_page(page, screen)
    await page.get_by_role("button", name="Publish").click()
    await expect(page.get_by_role("alert")).to_contain_text("Published version 1.")


async def publish_agent(page: Page, base: str) -> str:
    """The agent, both operations bound, published; returns its MCP endpoint's path as
    its page shows it."""
    await page.goto(f"{base}/agents")
    await check_page(page, "e2e-agents-empty")
    await page.get_by_label("Slug").fill(AGENT)
    await page.get_by_label("Title").fill("Orders desk")
    await page.get_by_label("Description").fill("Reads and refunds orders.")
    await page.get_by_role("button", name="Create agent").click()
    await expect(page).to_have_url(f"{base}/agents/{AGENT}?done=created")
    await page.get_by_role("checkbox", name=re.compile(READ_TOOL)).check()
    await page.get_by_role("checkbox", name=re.compile(GATED_TOOL)).check()
    await page.get_by_role("button", name="Save draft").click()
    await expect(page.get_by_text("Draft saved")).to_be_visible()
    await page.get_by_role("button", name="Publish", exact=True).click()
    await expect(page.get_by_role("heading", name="Published as version 1")).to_be_visible()
    await check_page(page, "e2e-agent-published")
    return (await page.locator("#endpoint-url").text_content() or "").strip()


async def create_key(page: Page, base: str, kind: str, screen: str) -> str:
    """A key of the agent, read from the page that shows it this once."""
    await page.goto(f"{base}/keys")
    await page.get_by_label("Agent", exact=True).select_option(AGENT)
    await page.get_by_label(kind).check()
    await page.get_by_label("Name (optional)").fill(f"end-to-end {kind.lower()}")
    await page.get_by_role("button", name="Create key").click()
    new_key = page.locator("#new-key")
    await expect(new_key).to_be_visible()
    await check_page(page, screen)
    return (await new_key.text_content() or "").strip()


async def filter_call_log(page: Page, base: str, tool: str, calls: int) -> Locator:
    """The call log filtered by ``tool`` through its form, once the gateway's batch
    holds ``calls`` calls of it; its rows."""
    await page.goto(f"{base}/calls")
    await page.get_by_label("Tool").fill(tool)
    await page.get_by_role("button", name="Filter").click()
    await expect(page).to_have_url(re.compile(rf"/calls\?tool={tool}$"))
    rows = page.locator("tbody tr")
    for _ in range(50):  # the page says: calls show up about a second after they end
        if await rows.count() >= calls:
            break
        await asyncio.sleep(0.2)
        await page.reload()
    await expect(rows).to_have_count(calls)
    return rows


async def approve_in_inbox(page: Page, inbox_url: str, key: str, approval_id: str) -> None:
    await page.goto(inbox_url)
    await expect(page.get_by_role("heading", level=1)).to_have_text(f"Approvals {WS}/{AGENT}")
    await check_page(page, "e2e-inbox-key")
    await page.get_by_role("textbox", name="Approval key").fill(key)
    await page.get_by_role("button", name="Open the inbox").click()
    pending = page.locator(f"#pending article#{approval_id}")
    await expect(pending.get_by_role("heading", name=GATED_TOOL)).to_be_visible()
    await expect(pending.locator("dl.args dd")).to_have_text(["A-7"])
    await check_page(page, "e2e-inbox-pending")
    await pending.get_by_label("Note (optional)").fill("Refund agreed with the customer")
    await pending.get_by_role("button", name="Approve").click()
    finished = page.locator(f"#recent article#{approval_id}")
    await expect(finished.locator(".badge")).to_have_text("completed", timeout=20_000)
    await check_page(page, "e2e-inbox-decided")


async def revoke_agent_key(page: Page, base: str) -> None:
    await page.goto(f"{base}/keys")
    await page.get_by_role("link", name=re.compile(r"^Revoke crk_agent_")).click()
    await expect(page.get_by_role("heading", name="Revoke API key")).to_be_visible()
    await check_page(page, "e2e-key-revoke")
    await page.get_by_role("button", name="Revoke key").click()
    await expect(page.get_by_text("Key revoked")).to_be_visible()
    await check_page(page, "e2e-keys-revoked")


# --- the viewer ----------------------------------------------------------------------


async def forged_post(page: Page, path: str, form: dict[str, str]) -> dict[str, Any]:
    """A same-origin form POST from the page's own script context with the session's
    CSRF token (as the page's htmx would send it); its status, type and body."""
    answer: dict[str, Any] = await page.evaluate(
        """async ([path, form]) => {
            const csrf = JSON.parse(document.body.getAttribute("hx-headers"))["X-CSRF-Token"];
            const body = new URLSearchParams({...form, _csrf: csrf});
            const r = await fetch(path, {method: "POST", body, redirect: "manual"});
            return {status: r.status, type: r.type, text: await r.text()};
        }""",
        [path, form],
    )
    return answer


async def check_viewer_sees_no_write_controls(page: Page, base: str) -> None:
    await page.goto(f"{base}/operations")
    await expect(page.get_by_role("link", name=READ_TOOL)).to_be_visible()
    await expect(page.get_by_role("link", name="New operation")).to_have_count(0)
    await check_page(page, "e2e-viewer-operations")
    await page.get_by_role("link", name=GATED_TOOL).click()
    await expect(page.get_by_role("heading", name="Versions")).to_be_visible()
    await expect(page.get_by_role("link", name="Edit the draft")).to_have_count(0)
    for name in ("Publish", "Discard", "Roll back"):
        await expect(page.get_by_role("button", name=re.compile(f"^{name}"))).to_have_count(0)
    await check_page(page, "e2e-viewer-operation")

    await page.goto(f"{base}/agents")
    await expect(page.get_by_role("link", name=AGENT)).to_be_visible()
    await expect(page.get_by_role("button", name="Create agent")).to_have_count(0)
    await check_page(page, "e2e-viewer-agents")
    await page.goto(f"{base}/agents/{AGENT}")
    for name in ("Save draft", "Publish", "Unpublish", "Subscribe"):
        await expect(page.get_by_role("button", name=name, exact=True)).to_have_count(0)
    for box in await page.get_by_role("checkbox").all():
        await expect(box).to_be_disabled()
    await check_page(page, "e2e-viewer-agent")

    await page.goto(f"{base}/keys")
    await expect(page.locator("tbody tr")).to_have_count(2)
    await expect(page.get_by_role("button", name="Create key")).to_have_count(0)
    await expect(page.get_by_role("link", name=re.compile(r"^Revoke"))).to_have_count(0)
    await check_page(page, "e2e-viewer-keys")


# --- the flow ------------------------------------------------------------------------


async def test_an_owner_builds_publishes_and_operates_an_agent_and_a_viewer_cannot_write(
    browser: Browser, egress_server: Server, upstream: ThreadedServer, tmp_path: Path
) -> None:
    server = egress_server
    admin = CliClient(server.url, server.admin_token)
    admin.post("/workspaces", {"slug": WS})
    async with httpx.AsyncClient(base_url=server.url) as api:
        await grant_egress(api, server.admin_token, WS, f"127.0.0.1:{upstream.port}")
    base = f"{server.url}/ui/w/{WS}"
    upstream.hits.clear()

    async with gateway_for(server, upstream, tmp_path) as gateway, browser_page(browser) as page:
        # 1. Sign in through the form with an admin token.
        await page.goto(f"{server.url}/ui/sign-in")
        await check_page(page, "e2e-sign-in")
        await browser_sign_in(page, server.url, server.admin_token)
        await expect(page).to_have_url(f"{base}")  # the only workspace opens at once
        await check_page(page, "e2e-overview")

        # 2. Two operations through the wizard; 3. the agent serving both.
        await build_read_operation(page, base, upstream.port)
        assert upstream.hits == ["GET /orders/A-7"]  # try-it called the upstream
        await build_gated_operation(page, base, upstream.port)
        await page.goto(f"{base}/operations")
        await expect(page.get_by_role("link", name=READ_TOOL)).to_be_visible()
        await expect(page.get_by_role("link", name=GATED_TOOL)).to_be_visible()
        await check_page(page, "e2e-operations")
        endpoint_path = await publish_agent(page, base)
        assert endpoint_path == f"/mcp/v1/{WS}/{AGENT}"

        # 4. Its keys, each read from the page that shows it once.
        agent_key = await create_key(page, base, "Agent key", "e2e-key-created")
        assert agent_key.startswith("crk_agent_")
        approval_key = await create_key(page, base, "Approval key", "e2e-approval-key")
        assert approval_key.startswith("crk_approval_")
        await page.goto(f"{base}/keys")
        assert agent_key not in await page.content()  # shown once
        assert approval_key not in await page.content()
        await check_page(page, "e2e-keys")

        # 5. The MCP SDK calls the read tool; the call log shows it.
        mcp_url = gateway.url + endpoint_path
        read = await call_tool(mcp_url, agent_key, READ_TOOL)
        assert read.is_error is False, read
        assert "/orders/A-7" in read.content[0].text
        assert upstream.hits[-1] == "GET /orders/A-7"
        logged = await filter_call_log(page, base, READ_TOOL, 1)
        await expect(logged.locator("td code").nth(1)).to_have_text(READ_TOOL)
        # The caller column names the agent key that called (its shown prefix).
        await expect(logged.locator("td code").first).to_have_text(display_prefix(agent_key))
        await expect(logged.locator(".badge")).to_have_text("ok")
        await check_page(page, "e2e-calls")

        # 6. The gated tool waits for a person; the approver inbox decides it.
        asked = await call_tool(mcp_url, agent_key, GATED_TOOL)
        assert asked.structured_content["status"] == "approval_required", asked
        approval_id = str(asked.structured_content["approval_id"])
        assert "POST /orders/A-7/refund" not in upstream.hits  # nothing sent yet
        inbox_url = f"{gateway.url}/v1/{WS}/{AGENT}/approvals/inbox"
        async with browser_page(browser) as inbox:  # the approver's own browser
            await approve_in_inbox(inbox, inbox_url, approval_key, approval_id)
        assert upstream.hits[-1] == "POST /orders/A-7/refund"
        delivered = await call_tool(mcp_url, agent_key, GATED_TOOL)
        assert delivered.is_error is False, delivered
        assert delivered.meta["crank/approval_status"] == "completed"
        assert delivered.meta["crank/approval_id"] == approval_id
        assert upstream.hits.count("POST /orders/A-7/refund") == 1  # not called again
        logged = await filter_call_log(page, base, GATED_TOOL, 3)
        # Newest first: the repeat call, the approved call the gateway made, the ask.
        outcomes = ["approval_completed", "ok", "approval_required"]
        await expect(logged.locator(".badge")).to_have_text(outcomes)
        await check_page(page, "e2e-calls-approval")
        await logged.last.get_by_role("link", name="approval").click()  # the log links it
        await expect(page).to_have_url(f"{base}/approvals/{approval_id}")
        await expect(page.locator(".facts")).to_contain_text("completed")
        await check_page(page, "e2e-approval")

        # 7. The revoked agent key is refused on the client's next call.
        await revoke_agent_key(page, base)
        statuses: list[int] = []
        refused = pytest.RaisesExc(MCPError, check=lambda error: error.code == REFUSED)
        with pytest.RaisesGroup(refused, flatten_subgroups=True):  # the SDK's task group
            await call_tool(mcp_url, agent_key, READ_TOOL, statuses)
        assert set(statuses) == {401}  # the SDK tries both eras: both refused

    # 8. A viewer of the workspace: no write control, and a forged write is refused.
    viewer = await make_token(server.database_url, "viewer", workspace=WS, name="vera")
    async with browser_page(browser) as page:
        await browser_sign_in(page, server.url, viewer)
        await check_viewer_sees_no_write_controls(page, base)
        for path, form in (
            (f"/ui/w/{WS}/agents", {"slug": "forged"}),
            (f"/ui/w/{WS}/keys", {"agent": AGENT, "kind": "agent"}),
        ):
            forged = await forged_post(page, path, form)
            assert forged["status"] == 403, path
            assert "<code>forbidden</code>" in forged["text"], path
        # The same request shape is admitted where a viewer may write: signing out.
        signed_out = await forged_post(page, "/ui/sign-out", {})
        assert signed_out["type"] == "opaqueredirect"
    agents = admin.get(f"/workspaces/{WS}/agents")
    assert [agent["slug"] for agent in agents["items"]] == [AGENT]  # nothing forged
    assert len(admin.get(f"/workspaces/{WS}/keys")["items"]) == 2
