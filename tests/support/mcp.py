"""The MCP wire as the gateway tests write it: the legacy era's initialize and
headers, the modern era's headers and request bodies, and a client that sends
what curl sends."""

from __future__ import annotations

from typing import Any

import httpx

from tests.support.gateway import SEED_URL_PATH

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "curl", "version": "1.0.0"},
    },
}
TOOLS_LIST = {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}


def bearer(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}


async def open_session(http: httpx.AsyncClient, key: str, version: str = "2025-06-18") -> str:
    """A legacy session opened at the seed's URL; its session id."""
    body = {**INIT, "params": {**INIT["params"], "protocolVersion": version}}  # type: ignore[dict-item]
    response = await http.post(SEED_URL_PATH, json=body, headers=bearer(key))
    assert response.status_code == 200, response.text
    return response.headers["mcp-session-id"]


VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def modern(key: str, method: str, **extra: str) -> dict[str, str]:
    """The headers of a modern-era request for ``method``."""
    return {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": VERSION,
        "Mcp-Method": method,
        **extra,
    }


def request(method: str, params: dict[str, Any] | None = None, meta: Any = META) -> dict[str, Any]:
    """A modern-era JSON-RPC request body, ``_meta`` included unless ``meta`` is None."""
    body_params: dict[str, Any] = dict(params or {})
    if meta is not None:
        body_params["_meta"] = meta
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": body_params}


def curl_client(base_url: str) -> httpx.AsyncClient:
    """An httpx client that adds only what curl adds itself (Host, User-Agent, Content-Length)."""
    http = httpx.AsyncClient(base_url=base_url, timeout=20)
    for name in ("Accept", "Accept-Encoding", "Connection"):
        del http.headers[name]
    http.headers["User-Agent"] = "curl/8.5.0"
    return http
