"""The seed's curl lines (mcp-interface.md), replayed byte for byte at a real gateway.

The bodies below are the exact ``--data`` strings of the seed's initialize,
tools/list and tools/call examples (curl sends a literal ``--data`` string as
it is, newlines and indentation included), with the headers each line sets:
``Accept: application/json`` only and the session id for tools/list and
tools/call, no ``notifications/initialized``, no ``MCP-Protocol-Version``.

The catalog is the demo's own ``frankfurter_latest_rate`` operation and
``currency-rates`` agent, loaded from control_plane/demo/demo.yaml as the demo
seed loads it, with one change made honestly through the control-plane API:
the operation's ``request.url`` points at a local upstream on 127.0.0.1 that
stands in for https://api.frankfurter.dev (keeping the path ``/v1/latest``),
so that nothing here resolves or dials the real host.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import web

from tests.support.api import Client
from tests.support.gateway import SEED_URL_PATH, run_gateway, serve_upstream
from tests.support.mcp import curl_client
from tests.support.processes import free_port
from tests.support.seed import (
    SEED_INITIALIZE,
    SEED_TOOLS_CALL,
    SEED_TOOLS_LIST,
    seed_demo_rates,
    seed_headers,
)

# What api.frankfurter.dev answers for /v1/latest?base=USD&symbols=EUR (its documented shape).
FRANKFURTER_ANSWER = {"amount": 1.0, "base": "USD", "date": "2026-11-27", "rates": {"EUR": 0.9464}}


class Frankfurter:
    """Stands in for api.frankfurter.dev on 127.0.0.1."""

    def __init__(self) -> None:
        self.port = free_port()
        self.seen: list[tuple[str, str, dict[str, str]]] = []

    async def any(self, request: web.Request) -> web.Response:
        self.seen.append((request.method, request.raw_path, dict(request.headers)))
        if request.path != "/v1/latest":
            return web.json_response({"message": "not found"}, status=404)
        return web.json_response(FRANKFURTER_ANSWER)


@pytest.fixture
async def frankfurter() -> AsyncIterator[Frankfurter]:
    state = Frankfurter()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", state.any)
    async with serve_upstream(app, state.port):
        yield state


async def test_the_seed_curl_lines_replayed_byte_for_byte_call_the_upstream(
    client: Client,
    admin_token: str,
    database_url: str,
    tmp_path: Path,
    frankfurter: Frankfurter,
) -> None:
    key = await seed_demo_rates(client, admin_token, frankfurter.port)
    env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{frankfurter.port}"}
    async with (
        run_gateway(database_url, tmp_path, extra_env=env) as gateway,
        curl_client(gateway.url) as http,
    ):
        # curl -i ... -H 'Accept: application/json, text/event-stream' --data '<initialize>'
        init = await http.post(SEED_URL_PATH, content=SEED_INITIALIZE, headers=seed_headers(key))
        assert init.status_code == 200, init.text
        assert init.json()["result"]["protocolVersion"] == "2025-06-18"
        session_id = init.headers["MCP-Session-Id"]
        in_session = seed_headers(key, session_id)

        listed = await http.post(SEED_URL_PATH, content=SEED_TOOLS_LIST, headers=in_session)
        assert listed.status_code == 200, listed.text
        assert listed.headers["content-type"] == "application/json"
        assert [t["name"] for t in listed.json()["result"]["tools"]] == ["frankfurter_latest_rate"]
        assert frankfurter.seen == []

        called = await http.post(SEED_URL_PATH, content=SEED_TOOLS_CALL, headers=in_session)

    assert called.status_code == 200, called.text
    assert called.headers["content-type"] == "application/json"
    # "Crank выполнит REST-запрос: GET https://api.frankfurter.dev/v1/latest?base=USD&symbols=EUR"
    assert [(method, raw_path) for method, raw_path, _ in frankfurter.seen] == [
        ("GET", "/v1/latest?base=USD&symbols=EUR")
    ]
    upstream_headers = frankfurter.seen[0][2]
    assert upstream_headers["Accept"] == "application/json"  # the demo's static header
    assert all(key not in value for value in upstream_headers.values())  # the agent key stays

    message = called.json()
    assert (message["jsonrpc"], message["id"]) == ("2.0", 3)
    result = message["result"]
    assert result["isError"] is False
    selected = {"base": "USD", "date": "2026-11-27", "rates": {"EUR": 0.9464}}
    assert result["structuredContent"] == selected
    assert [block["type"] for block in result["content"]] == ["text"]
    assert json.loads(result["content"][0]["text"]) == selected
