"""Protected Resource Metadata (RFC 9728) of each agent endpoint, at the
path-aware well-known URL: ``/.well-known/oauth-protected-resource`` followed
by the endpoint's path (docs/architecture.md, "Identity").

The document is built with the snapshot (mcp_gateway.catalog.access); an
agent that is not published, or trusts no identity provider, has none (404).
It is public, as the MCP authorization spec requires: a client reads it
before it has any token, from a browser too (hence ``*`` for CORS).
"""

from __future__ import annotations

import re

from mcp_gateway.transport.asgi import Scope, Send, respond
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.state import GatewayState

# Any prefix before /v1/...: a proxy may publish the gateway under one
# (CRANK_PUBLIC_PATH_PREFIX) and route the well-known path unchanged.
PATH = re.compile(r"^/\.well-known/oauth-protected-resource(?:/[^/]+)*?/v1/([^/]+)/([^/]+)/?$")
_CORS = {
    "Access-Control-Allow-Origin": "*",
    "Access-Control-Allow-Methods": "GET, OPTIONS",
    "Access-Control-Allow-Headers": "MCP-Protocol-Version",
}


async def handle(state: GatewayState, scope: Scope, send: Send, workspace: str, slug: str) -> None:
    method = scope["method"]
    if method == "OPTIONS":
        await respond(send, 204, headers={**_CORS, "Access-Control-Max-Age": "86400"})
        return
    if method not in ("GET", "HEAD"):
        problem = ProtocolError(405, "method not allowed")
        await respond(send, 405, problem.problem_body(), headers={"Allow": "GET, OPTIONS"})
        return
    agent = state.catalog.snapshot.agents.get((workspace, slug))
    document = agent.access.metadata if agent is not None and agent.published else b""
    if not document:
        problem = ProtocolError(404, f"agent {workspace}/{slug} takes no OAuth tokens")
        await respond(send, 404, problem.problem_body(), headers=_CORS)
        return
    headers = {**_CORS, "Cache-Control": "public, max-age=300"}
    await respond(send, 200, b"" if method == "HEAD" else document, headers=headers)
