"""Copy-paste configurations of MCP clients for one agent's endpoint (the agent page).

Keys are shown once, when they are created, so every snippet holds a placeholder
(or reads ``CRANK_AGENT_KEY`` from the environment) where the agent key goes.
The curl lines are the ones ``crank up`` prints (control_plane/cli/banner.py).
"""

from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass

from control_plane.cli.banner import approval_curls, mcp_curls
from shared.public_urls import mcp_endpoint_path

KEY_PLACEHOLDER = "<agent key: crk_agent_...>"
APPROVAL_KEY_PLACEHOLDER = "<approval key: crk_approval_...>"
KEY_VARIABLE = "CRANK_AGENT_KEY"
# Shell-safe (no < or >): the curl lines hold it unquoted.
GATEWAY_PLACEHOLDER = "https://GATEWAY_HOST"


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where an agent is served: ``url`` is absolute when the gateway's public base
    (CRANK_PUBLIC_URL) is known, else the path on the gateway's host."""

    path: str
    url: str
    absolute: bool

    @property
    def client_url(self) -> str:
        """What a client configuration holds: the URL, or the path behind a placeholder
        host for the reader to fill in (a client cannot use a bare path)."""
        return self.url if self.absolute else f"{GATEWAY_PLACEHOLDER}{self.path}"

    @property
    def approvals(self) -> str:
        return f"{self.client_url}/approvals"

    @property
    def inbox(self) -> str:
        """The approver inbox, the gateway's page for people holding an approval key."""
        return f"{self.approvals}/inbox"


def endpoint(public_url: str, prefix: str, workspace: str, agent: str) -> Endpoint:
    """``public_url`` and ``prefix``: CRANK_PUBLIC_URL and CRANK_PUBLIC_PATH_PREFIX."""
    path = mcp_endpoint_path(prefix, workspace, agent)
    base = public_url.rstrip("/")
    return Endpoint(path=path, url=base + path, absolute=bool(base))


@dataclass(frozen=True, slots=True)
class Snippet:
    id: str  # the element id a copy button names
    title: str
    where: str  # where the text goes, one sentence
    text: str


def _server_name(workspace: str, agent: str) -> str:
    return re.sub(r"[^a-z0-9-]", "-", f"crank-{workspace}-{agent}")


def _json(value: object) -> str:
    return json.dumps(value, indent=2)


def _unindented(lines: list[str]) -> str:
    """The banner's curl lines without the banner's two-space margin."""
    return "\n\n".join(textwrap.dedent(line) for line in lines)


def client_snippets(target: Endpoint, workspace: str, agent: str) -> list[Snippet]:
    name = _server_name(workspace, agent)
    url = target.client_url
    bearer = f"Bearer {KEY_PLACEHOLDER}"
    return [
        Snippet(
            "cfg-claude-desktop",
            "Claude Desktop",
            "claude_desktop_config.json (Settings → Developer → Edit Config); "
            "mcp-remote bridges Claude Desktop's local servers to this HTTP endpoint.",
            _json(
                {
                    "mcpServers": {
                        name: {
                            "command": "npx",
                            "args": ["-y", "mcp-remote", url, "--header", "Authorization:${AUTH}"],
                            "env": {"AUTH": bearer},
                        }
                    }
                }
            ),
        ),
        Snippet(
            "cfg-claude-code",
            "Claude Code",
            "Run once in a terminal.",
            f"claude mcp add --transport http {name} {url} \\\n"
            f"  --header 'Authorization: {bearer}'",
        ),
        Snippet(
            "cfg-cursor",
            "Cursor",
            "~/.cursor/mcp.json, or .cursor/mcp.json in a project.",
            _json({"mcpServers": {name: {"url": url, "headers": {"Authorization": bearer}}}}),
        ),
        Snippet(
            "cfg-vscode",
            "VS Code",
            ".vscode/mcp.json; VS Code asks for the key once and keeps it.",
            _json(
                {
                    "inputs": [
                        {
                            "type": "promptString",
                            "id": "crank-agent-key",
                            "description": "Crank agent key (crk_agent_...)",
                            "password": True,
                        }
                    ],
                    "servers": {
                        name: {
                            "type": "http",
                            "url": url,
                            "headers": {"Authorization": "Bearer ${input:crank-agent-key}"},
                        }
                    },
                }
            ),
        ),
        Snippet(
            "cfg-python",
            "Python MCP SDK",
            f'pip install "mcp>=2" (the 2.x SDK); the key from the environment variable '
            f"{KEY_VARIABLE}.",
            textwrap.dedent(f"""\
                import asyncio
                import os

                import httpx2
                from mcp import Client
                from mcp.client.streamable_http import streamable_http_client

                URL = "{url}"


                async def main() -> None:
                    headers = {{"Authorization": "Bearer " + os.environ["{KEY_VARIABLE}"]}}
                    # Reads may wait long: a tools/call can wait for a person's approval.
                    timeout = httpx2.Timeout(30, read=300)
                    async with httpx2.AsyncClient(headers=headers, timeout=timeout) as http:
                        async with Client(streamable_http_client(URL, http_client=http)) as client:
                            listed = await client.list_tools()
                    for tool in listed.tools:
                        print(tool.name)


                asyncio.run(main())
                """),
        ),
        Snippet(
            "cfg-typescript",
            "TypeScript MCP SDK",
            f"npm install @modelcontextprotocol/sdk; an ES module (client.mjs); the key from "
            f"{KEY_VARIABLE}.",
            textwrap.dedent(f"""\
                import {{ Client }} from "@modelcontextprotocol/sdk/client/index.js";
                import {{ StreamableHTTPClientTransport }} from "@modelcontextprotocol/sdk/client/streamableHttp.js";

                const transport = new StreamableHTTPClientTransport(new URL("{url}"), {{
                  requestInit: {{ headers: {{ Authorization: `Bearer ${{process.env.{KEY_VARIABLE}}}` }} }},
                }});
                const client = new Client({{ name: "my-app", version: "1.0.0" }});
                await client.connect(transport);
                const {{ tools }} = await client.listTools();
                for (const tool of tools) console.log(tool.name);
                await client.close();
                """),
        ),
        Snippet(
            "cfg-inspector",
            "MCP Inspector",
            "Lists the tools from a terminal; without --cli it opens the Inspector's page "
            "(transport Streamable HTTP, this URL, the Authorization header).",
            f"npx @modelcontextprotocol/inspector --cli {url} --transport http \\\n"
            f"  --header 'Authorization: {bearer}' --method tools/list",
        ),
        Snippet(
            "cfg-curl",
            "curl",
            "initialize, then tools/list in the session initialize opened (its "
            "MCP-Session-Id answer header).",
            _unindented(mcp_curls(url, KEY_PLACEHOLDER)),
        ),
    ]


def approver_snippet(target: Endpoint) -> Snippet:
    """The approver's side, with an approval key: never an agent key, never an LLM's."""
    return Snippet(
        "cfg-approvals",
        "Approvals (the human approver's interface)",
        "List, read, approve and deny this agent's pending approvals with an approval key.",
        # The console speaks English, so do the notes its decisions send.
        _unindented(approval_curls(target.approvals, APPROVAL_KEY_PLACEHOLDER, "en")),
    )
