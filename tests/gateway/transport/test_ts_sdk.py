"""The official TypeScript SDK clients against a real gateway, on Node.js 22.

- ``@modelcontextprotocol/sdk`` 1.x (tests/js/list_tools_v1.mjs): the legacy
  handshake at its latest revision, tools/list, then DELETE to end the session.
- ``@modelcontextprotocol/client`` 2.x (tests/js/list_tools_v2.mjs): in
  ``auto`` mode it probes ``server/discover`` and stays on the 2026-07-28
  wire; pinned to 2026-07-28 it must find that revision; in ``legacy`` mode
  it runs the 2025 handshake.

One gateway serves the module (see tests.support.js.seeded_gateway).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from litestar import Litestar

from tests.support.gateway import SEED_URL_PATH, Catalog, Gateway
from tests.support.js import require_node22, run_node, run_node_json, seeded_gateway

TOOLS = ["frankfurter_latest_rate"]


@pytest.fixture(scope="module")
async def served(
    pg_server_url: str, run_database: str, app: Litestar, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[tuple[Catalog, Gateway]]:
    require_node22()
    async with seeded_gateway(
        pg_server_url, run_database, app, tmp_path_factory.mktemp("ts-sdk")
    ) as served:
        yield served


async def assert_session_ended(gateway: Gateway, key: str, session_id: str, version: str) -> None:
    """A request inside a session the client ended gets 404 (docs/architecture.md, "Sessions")."""
    async with httpx.AsyncClient(base_url=gateway.url, timeout=10) as http:
        response = await http.post(
            SEED_URL_PATH,
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
            headers={
                "Authorization": f"Bearer {key}",
                "Accept": "application/json, text/event-stream",
                "MCP-Session-Id": session_id,
                "MCP-Protocol-Version": version,
            },
        )
    assert response.status_code == 404, response.text


async def test_sdk_v1_lists_tools_and_ends_its_session(
    served: tuple[Catalog, Gateway],
) -> None:
    catalog, gateway = served
    output = await run_node_json(
        "list_tools_v1.mjs", gateway.url + SEED_URL_PATH, catalog.agent_key
    )
    assert output["tools"] == TOOLS
    assert output["protocolVersion"] == "2025-11-25"
    session_id = output["sessionId"]
    assert isinstance(session_id, str)
    assert session_id
    # The 1.x transport forgets the id once its DELETE was answered.
    assert output["terminatedSessionId"] is None
    await assert_session_ended(gateway, catalog.agent_key, session_id, "2025-11-25")


@pytest.mark.parametrize(
    ("mode", "era", "version"),
    [
        ("auto", "modern", "2026-07-28"),
        ("2026-07-28", "modern", "2026-07-28"),
        ("legacy", "legacy", "2025-11-25"),
    ],
)
async def test_sdk_v2_lists_tools(
    served: tuple[Catalog, Gateway], mode: str, era: str, version: str
) -> None:
    catalog, gateway = served
    output = await run_node_json(
        "list_tools_v2.mjs", gateway.url + SEED_URL_PATH, catalog.agent_key, mode
    )
    assert output["tools"] == TOOLS
    assert (output["era"], output["protocolVersion"]) == (era, version)
    if era == "modern":
        assert output["sessionId"] is None  # 2026-07-28 has no sessions
    else:
        assert output["sessionId"]
        await assert_session_ended(gateway, catalog.agent_key, output["sessionId"], version)


async def test_wrong_key_fails_the_connect(served: tuple[Catalog, Gateway]) -> None:
    """The scripts really send the key: without a valid one the connect is refused."""
    _, gateway = served
    code, stdout, stderr = await run_node(
        "list_tools_v1.mjs", gateway.url + SEED_URL_PATH, "crk_agent_" + "A" * 49
    )
    assert code != 0, stdout
    assert "missing or invalid API key" in stderr, stderr  # the gateway's 401 body
