"""The seed's curl lines (docs/mcp-interface.md) and the catalog they talk to, for the tests
that replay them at a gateway: in process (tests/gateway/transport/test_seed_replay.py) and
through the compose stack's nginx (tests/deploy/test_compose.py)."""

from __future__ import annotations

from typing import Any

import httpx

from control_plane.demo import load_demo_file
from shared.engine.spec import spec_to_builtins
from tests.support.api import auth, grant_egress
from tests.support.gateway import SEED_URL_PATH
from tests.support.tool_calls import BASE, ok, publish_operation

# The seed's --data strings, byte for byte.
SEED_INITIALIZE = (
    b'{\n    "jsonrpc": "2.0",\n    "id": 1,\n    "method": "initialize",\n    "params": {\n'
    b'      "protocolVersion": "2025-06-18",\n      "capabilities": {},\n      "clientInfo": {\n'
    b'        "name": "curl",\n        "version": "1.0.0"\n      }\n    }\n  }'
)
SEED_TOOLS_LIST = (
    b'{\n    "jsonrpc": "2.0",\n    "id": 2,\n    "method": "tools/list",\n    "params": {}\n  }'
)
SEED_TOOLS_CALL = (
    b'{\n    "jsonrpc": "2.0",\n    "id": 3,\n    "method": "tools/call",\n    "params": {\n'
    b'      "name": "frankfurter_latest_rate",\n      "arguments": {\n        "base": "USD",\n'
    b'        "quote": "EUR"\n      }\n    }\n  }'
)


async def seed_demo_rates(client: httpx.AsyncClient, admin: str, upstream_port: int) -> str:
    """The demo's currency-rates agent and its operation, the URL pointed at the stand-in."""
    demo = load_demo_file(8090)
    operation = next(op for op in demo.operations if op.name == "frankfurter_latest_rate")
    agent = next(a for a in demo.agents if a.slug == "currency-rates").agent()
    spec: dict[str, Any] = spec_to_builtins(operation)
    assert spec["request"]["url"] == "https://api.frankfurter.dev/v1/latest"
    spec["request"]["url"] = f"http://127.0.0.1:{upstream_port}/v1/latest"

    await ok(await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=auth(admin)))
    await grant_egress(client, admin, "default", f"127.0.0.1:{upstream_port}")
    await publish_operation(client, admin, spec)
    created = await ok(
        await client.post(f"{BASE}/agents", json=spec_to_builtins(agent), headers=auth(admin))
    )
    await ok(
        await client.post(
            f"{BASE}/agents/currency-rates/publish", headers=auth(admin, created.headers["etag"])
        )
    )
    key = await ok(
        await client.post(f"{BASE}/keys", json={"agent": "currency-rates"}, headers=auth(admin))
    )
    return str(key.json()["key"])


def seed_headers(key: str, session_id: str | None = None) -> list[tuple[str, str]]:
    """The headers the seed's curl lines set: initialize accepts JSON or SSE, the later lines
    JSON only, with the session id."""
    sent = [("Authorization", f"Bearer {key}"), ("Content-Type", "application/json")]
    if session_id is None:
        return [*sent, ("Accept", "application/json, text/event-stream")]
    return [*sent, ("Accept", "application/json"), ("MCP-Session-Id", session_id)]


async def seed_tool_names(http: httpx.AsyncClient, key: str) -> list[str] | None:
    """The seed's initialize and tools/list at ``http`` (a curl_client): the tool names, or
    None while the gateway does not know the key yet."""
    init = await http.post(SEED_URL_PATH, content=SEED_INITIALIZE, headers=seed_headers(key))
    if init.status_code == 401:
        return None
    assert init.status_code == 200, init.text
    session = init.headers["MCP-Session-Id"]
    listed = await http.post(
        SEED_URL_PATH, content=SEED_TOOLS_LIST, headers=seed_headers(key, session)
    )
    assert listed.status_code == 200, listed.text
    return [tool["name"] for tool in listed.json()["result"]["tools"]]
