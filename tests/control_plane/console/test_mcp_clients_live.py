"""Every client configuration the agent page prints works against a live gateway, with the
SDK versions the tests pin (requirements-dev.lock's ``mcp``, tests/js's TypeScript SDK):
the snippet is rendered for the gateway's URL exactly as the page renders it, and the key
goes where the snippet says (its environment variable, or in place of the placeholder).

One gateway serves the module (see tests.support.js.seeded_gateway).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from litestar import Litestar

from control_plane.console.mcp_clients import (
    KEY_PLACEHOLDER,
    KEY_VARIABLE,
    Snippet,
    client_snippets,
    endpoint,
)
from tests.support.client_snippets import (
    header_pair,
    printed_curl_lines,
    run_mcp_curls,
    run_node_program,
    run_python_program,
    sdk_tool_names,
)
from tests.support.gateway import Catalog, Gateway
from tests.support.js import require_node22, seeded_gateway

TOOLS = ["frankfurter_latest_rate"]
WORKSPACE, AGENT = "default", "currency-rates"


@pytest.fixture(scope="module")
async def served(
    pg_server_url: str, run_database: str, app: Litestar, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Catalog, Gateway]]:
    require_node22()
    async with seeded_gateway(
        pg_server_url, run_database, app, tmp_path_factory.mktemp("client-snippets")
    ) as served:
        yield served


def printed(gateway: Gateway) -> dict[str, Snippet]:
    """The agent page's snippets, the gateway's URL as its CRANK_PUBLIC_URL."""
    target = endpoint(gateway.url, "", WORKSPACE, AGENT)
    return {s.id: s for s in client_snippets(target, WORKSPACE, AGENT)}


def mcp_url(gateway: Gateway) -> str:
    return endpoint(gateway.url, "", WORKSPACE, AGENT).url


async def test_the_python_sdk_program_lists_the_tools(
    served: tuple[Catalog, Gateway], tmp_path: Path
) -> None:
    catalog, gateway = served
    program = printed(gateway)["cfg-python"].text
    output = run_python_program(program, tmp_path, KEY_VARIABLE, catalog.agent_key)
    assert output.splitlines() == TOOLS


async def test_the_typescript_sdk_program_lists_the_tools(
    served: tuple[Catalog, Gateway], tmp_path: Path
) -> None:
    catalog, gateway = served
    program = printed(gateway)["cfg-typescript"].text
    output = run_node_program(program, tmp_path, KEY_VARIABLE, catalog.agent_key)
    assert output.splitlines() == TOOLS


async def test_the_curl_lines_open_a_session_and_list_the_tools(
    served: tuple[Catalog, Gateway],
) -> None:
    catalog, gateway = served
    text = printed(gateway)["cfg-curl"].text.replace(KEY_PLACEHOLDER, catalog.agent_key)
    assert run_mcp_curls(printed_curl_lines(text)) == TOOLS


async def test_the_cursor_file_gives_a_url_and_headers_the_sdk_lists_tools_with(
    served: tuple[Catalog, Gateway],
) -> None:
    catalog, gateway = served
    text = printed(gateway)["cfg-cursor"].text.replace(KEY_PLACEHOLDER, catalog.agent_key)
    [server] = json.loads(text)["mcpServers"].values()
    assert server["url"] == mcp_url(gateway)
    assert await sdk_tool_names(server["url"], server["headers"]) == TOOLS


async def test_the_vscode_file_asks_for_the_key_and_sends_it(
    served: tuple[Catalog, Gateway],
) -> None:
    catalog, gateway = served
    config = json.loads(printed(gateway)["cfg-vscode"].text)
    [prompt] = config["inputs"]
    [server] = config["servers"].values()
    assert server["type"] == "http"
    # What VS Code does with ${input:id}: the answer to that prompt, put in place.
    asked = f"${{input:{prompt['id']}}}"
    headers = {
        name: value.replace(asked, catalog.agent_key) for name, value in server["headers"].items()
    }
    assert await sdk_tool_names(server["url"], headers) == TOOLS


async def test_the_claude_desktop_file_bridges_with_the_url_and_header_it_names(
    served: tuple[Catalog, Gateway],
) -> None:
    catalog, gateway = served
    text = printed(gateway)["cfg-claude-desktop"].text.replace(KEY_PLACEHOLDER, catalog.agent_key)
    [server] = json.loads(text)["mcpServers"].values()
    assert server["command"] == "npx"
    args: list[str] = server["args"]
    assert args[:2] == ["-y", "mcp-remote"]
    assert args[3] == "--header"
    url, header = args[2], args[4]
    # mcp-remote expands ${VAR} in a header from the server's env, then splits at ":".
    for name, value in server["env"].items():
        header = header.replace(f"${{{name}}}", value)
    assert await sdk_tool_names(url, header_pair(header)) == TOOLS


@pytest.mark.parametrize(
    ("snippet", "program"),
    [
        ("cfg-claude-code", ["claude", "mcp", "add", "--transport", "http"]),
        ("cfg-inspector", ["npx", "@modelcontextprotocol/inspector", "--cli"]),
    ],
)
async def test_the_command_lines_give_a_url_and_header_the_sdk_lists_tools_with(
    served: tuple[Catalog, Gateway], snippet: str, program: list[str]
) -> None:
    catalog, gateway = served
    text = printed(gateway)[snippet].text.replace(KEY_PLACEHOLDER, catalog.agent_key)
    words = shlex.split(text.replace("\\\n", " "))  # as the shell reads the pasted lines
    assert words[: len(program)] == program
    url = next(word for word in words if "://" in word)
    header = words[words.index("--header") + 1]
    assert await sdk_tool_names(url, header_pair(header)) == TOOLS
