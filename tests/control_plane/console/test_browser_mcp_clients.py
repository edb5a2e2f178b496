"""The agent page's SDK programs as a person gets them: copied with the page's Copy button
in chromium, from a console whose CRANK_PUBLIC_URL is a live gateway, then run with the
SDK versions the tests pin; each lists the agent's tools. (Every snippet's text is run
in test_mcp_clients_live.py; this proves the page hands over that same working text.)"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.async_api import Browser

from control_plane.cli.client import Client as CliClient
from control_plane.console.mcp_clients import KEY_VARIABLE
from tests.support.browser import browser_page
from tests.support.cli import Server
from tests.support.client_snippets import run_node_program, run_python_program
from tests.support.console import browser_sign_in
from tests.support.control_plane_server import serve_control_plane
from tests.support.crank_files import rates_operation
from tests.support.gateway import run_gateway
from tests.support.js import require_node22
from tests.support.processes import free_port

WS, AGENT = "snippets", "rates"
TOOLS = ["frankfurter_latest_rate"]
Runner = Callable[[str, Path, str, str], str]


@dataclass(frozen=True)
class Console:
    server: Server
    agent_key: str


@pytest.fixture(scope="module")
async def console(
    pg_server_url: str, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[Console]:
    """A console naming a live gateway as its public URL, one published agent and its key."""
    require_node22()
    log_dir = tmp_path_factory.mktemp("browser-snippets")
    gateway_port = free_port()
    with serve_control_plane(
        pg_server_url,
        log_dir,
        f"crank_snippets_{os.getpid()}",
        CRANK_PUBLIC_URL=f"http://127.0.0.1:{gateway_port}",
    ) as server:
        api = CliClient(server.url, server.admin_token)
        api.post("/workspaces", {"slug": WS})
        agent = {"slug": AGENT, "title": "Rates", "operations": [TOOLS[0]]}
        crank_file = {"operations": [rates_operation()], "agents": [agent]}
        api.post(f"/workspaces/{WS}/apply", crank_file, {"publish": "true"})
        key = api.post(f"/workspaces/{WS}/keys", {"agent": AGENT})["key"]
        async with run_gateway(server.database_url, log_dir, port=gateway_port):
            yield Console(server, key)


@pytest.mark.parametrize(
    ("title", "run"),
    [("Python MCP SDK", run_python_program), ("TypeScript MCP SDK", run_node_program)],
)
async def test_the_copied_program_lists_the_agents_tools(
    browser: Browser, console: Console, tmp_path: Path, title: str, run: Runner
) -> None:
    server = console.server
    async with browser_page(browser) as page:
        await page.context.grant_permissions(
            ["clipboard-read", "clipboard-write"], origin=server.url
        )
        await browser_sign_in(page, server.url, server.admin_token)
        await page.goto(f"{server.url}/ui/w/{WS}/agents/{AGENT}")
        await page.get_by_text("Client configurations").click()
        snippet = page.locator("section.snippet").filter(
            has=page.get_by_role("heading", name=title, exact=True)
        )
        await snippet.get_by_role("button", name="Copy").click()
        copied = await page.evaluate("navigator.clipboard.readText()")
    assert isinstance(copied, str)
    output = run(copied, tmp_path, KEY_VARIABLE, console.agent_key)
    assert output.splitlines() == TOOLS
