# mypy: ignore-errors
# (typed against the 1.x SDK, which only the test's own virtual environment has)
"""A 1.x MCP Python SDK client, run by tests/gateway/transport/test_sdk_v1.py in its own
virtual environment (the SDK's 1.x and 2.x lines cannot share one).

Usage: ``python mcp_v1_client.py URL`` with the agent key in ``CRANK_AGENT_KEY``.
Connects over Streamable HTTP with ``Authorization: Bearer``, initializes,
lists the tools and prints one JSON object: the tool names, the negotiated
protocol version and the session id. Leaving the client's context sends the
DELETE that ends the session.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import warnings

from mcp import ClientSession
from mcp.client.streamable_http import streamablehttp_client

# streamablehttp_client is deprecated late in 1.x, and still what most 1.x programs call.
warnings.simplefilter("ignore", DeprecationWarning)


async def main(url: str, key: str) -> dict[str, object]:
    headers = {"Authorization": f"Bearer {key}"}
    async with (
        streamablehttp_client(url, headers=headers, timeout=10) as (read, write, session_id),
        ClientSession(read, write) as session,
    ):
        initialized = await session.initialize()
        listed = await session.list_tools()
        return {
            "tools": [tool.name for tool in listed.tools],
            "protocol_version": initialized.protocolVersion,
            "server_name": initialized.serverInfo.name,
            "session_id": session_id(),
        }


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], os.environ["CRANK_AGENT_KEY"]))))
