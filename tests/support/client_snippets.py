"""The client configurations Crank prints (the console's agent page, ``crank up``'s banner)
run as a user runs them: the SDK programs saved to a file and run (the venv's Python with
the pinned ``mcp``, tests/js's Node 22 with the pinned TypeScript SDK), the curl lines in
bash exactly as printed, and the configuration files' URL and headers given to the
official MCP SDK."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from tests.support.js import NODE, require_node22
from tests.support.paths import JS_DIR

SESSION_PLACEHOLDER = "<MCP-Session-Id from the initialize answer>"
APPROVAL_ID_PLACEHOLDER = "<approval_id>"
RUN_TIMEOUT_S = 60


def printed_curl_lines(block: str) -> list[str]:
    """Each curl command of a printed block, its continuation lines joined."""
    return [
        command.replace("\\\n", " ")
        for command in re.findall(r"^\s*(curl .*?)(?=^\s*curl |\n\n|\Z)", block, re.M | re.S)
    ]


def run_bash(command: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, f"{command}\nexited {done.returncode}: {done.stderr}"
    return done


def run_bash_json(command: str) -> Any:
    return json.loads(run_bash(command).stdout)


def run_mcp_curls(commands: list[str]) -> list[str]:
    """The initialize and tools/list lines as printed (the session id of the first answer
    put into the second, as the line asks): the tool names tools/list answered."""
    initialize, tools_list = commands
    opened = run_bash(initialize).stdout
    assert "HTTP/1.1 200" in opened, opened
    session = re.search(r"^mcp-session-id: (\S+)", opened, re.M | re.I)
    assert session is not None, opened
    assert SESSION_PLACEHOLDER in tools_list, tools_list
    listed = run_bash_json(tools_list.replace(SESSION_PLACEHOLDER, session[1]))
    return [tool["name"] for tool in listed["result"]["tools"]]


def _with_key(variable: str, key: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")} | {variable: key}


def run_python_program(text: str, tmp_path: Path, variable: str, key: str) -> str:
    """``text`` saved as a file and run by this venv's Python (the pinned ``mcp``),
    the key in the environment variable the program reads; its stdout."""
    program = tmp_path / "client.py"
    program.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(program)],
        env=_with_key(variable, key),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"python exited {done.returncode}:\n{done.stderr}"
    return done.stdout


def run_node_program(text: str, tmp_path: Path, variable: str, key: str) -> str:
    """``text`` saved as an ES module beside a link to tests/js/node_modules (so its imports
    resolve to the pinned SDK) and run by Node 22; its stdout."""
    require_node22()
    (tmp_path / "node_modules").symlink_to(JS_DIR / "node_modules", target_is_directory=True)
    program = tmp_path / "client.mjs"
    program.write_text(text, encoding="utf-8")
    done = subprocess.run(
        [str(NODE), str(program)],
        cwd=tmp_path,
        env=_with_key(variable, key),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, f"node exited {done.returncode}:\n{done.stderr}"
    return done.stdout


async def sdk_tool_names(url: str, headers: dict[str, str]) -> list[str]:
    """What the official Python SDK lists at ``url`` when it sends ``headers``."""
    async with (
        httpx2.AsyncClient(headers=headers, timeout=20) as http,
        McpClient(streamable_http_client(url, http_client=http)) as mcp,
    ):
        listed = await mcp.list_tools()
    return [tool.name for tool in listed.tools]


def header_pair(text: str, separator: str = ":") -> dict[str, str]:
    """``Name: value`` (as curl, claude and the Inspector take a header) as a mapping."""
    name, _, value = text.partition(separator)
    return {name.strip(): value.strip()}
