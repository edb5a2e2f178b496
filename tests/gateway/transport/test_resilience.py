"""The gateway through a Postgres outage and through SIGTERM with open streams.

The outage is real: the gateway reaches Postgres only through a TCP proxy in
this test, and cutting the proxy closes its listener and every connection, as
a database that goes away does. The control plane keeps the direct URL, so
admins can publish while the gateway is cut off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.support.api import Client, auth
from tests.support.gateway import (
    FRANKFURTER,
    SEED_URL_PATH,
    change_agent,
    run_gateway,
    seed_catalog,
    wait_until,
)
from tests.support.mcp import INIT, TOOLS_LIST, bearer, modern, open_session, request

BASE = "/api/v1/workspaces/default"


class PostgresProxy:
    """Forwards 127.0.0.1:<port> to the test server (TCP or Unix socket).

    ``cut`` closes the listener and drops every connection in both directions
    (the server went away); ``start`` listens again on the same port.
    ``freeze`` keeps every connection open but carries nothing, in either
    direction, until ``thaw`` (a silent network partition that heals)."""

    def __init__(self, server_url: str) -> None:
        params = conninfo_to_dict(server_url)
        if not params.get("host"):
            pytest.skip("the test server's URL names no host or socket directory to proxy")
        host, port = str(params["host"]), int(params.get("port") or 5432)
        self._unix_path = f"{host}/.s.PGSQL.{port}" if host.startswith("/") else None
        self._target = (host, port)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._pipes: set[asyncio.Task[None]] = set()
        self._flowing = asyncio.Event()
        self._flowing.set()
        self.port = 0

    def url_for(self, database_url: str) -> str:
        return make_conninfo(database_url, host="127.0.0.1", port=str(self.port))

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def _open_target(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self._unix_path is not None:
            return await asyncio.open_unix_connection(self._unix_path)
        return await asyncio.open_connection(*self._target)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await self._flowing.wait()
            up_reader, up_writer = await self._open_target()
        except OSError:
            writer.transport.abort()
            return
        self._writers |= {writer, up_writer}
        pipes = [
            asyncio.ensure_future(self._pipe(source, sink))
            for source, sink in ((reader, up_writer), (up_reader, writer))
        ]
        self._pipes.update(pipes)
        try:
            await asyncio.gather(*pipes, return_exceptions=True)
        finally:
            self._pipes.difference_update(pipes)

    async def _pipe(self, source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
        with contextlib.suppress(OSError):
            while data := await source.read(65536):
                await self._flowing.wait()
                sink.write(data)
                await sink.drain()
        sink.transport.abort()
        self._writers.discard(sink)

    def freeze(self) -> None:
        self._flowing.clear()

    def thaw(self) -> None:
        self._flowing.set()

    async def cut(self) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()
        for task in list(self._pipes):
            task.cancel()
        await asyncio.gather(*self._pipes, return_exceptions=True)
        await self._server.wait_closed()
        self._server = None

    async def close(self) -> None:
        if self._server is not None:
            await self.cut()


@pytest.fixture
async def proxy(pg_server_url: str) -> Any:
    proxy = PostgresProxy(pg_server_url)
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.close()


async def publish_second_tool(client: Client, admin: str) -> None:
    """Publish a new operation and bind it to currency-rates, then publish the agent."""
    h = auth(admin)
    spec = {**FRANKFURTER, "name": "frankfurter_rate_again"}
    op = await client.post(f"{BASE}/operations", json=spec, headers=h)
    assert op.is_success, op.text
    published = await client.post(
        f"{BASE}/operations/frankfurter_rate_again/publish", headers=auth(admin, op.headers["etag"])
    )
    assert published.is_success, published.text
    await change_agent(
        client, admin, {"operations": ["frankfurter_latest_rate", "frankfurter_rate_again"]}
    )


@pytest.mark.parametrize(
    ("refresh_ms", "listen"),
    [
        pytest.param(60_000, "true", id="listen-with-a-long-poll-interval"),
        pytest.param(300, "false", id="polling-alone"),
    ],
)
async def test_gateway_serves_its_last_snapshot_through_a_postgres_outage_and_recovers_by_itself(
    client: Client,
    admin_token: str,
    database_url: str,
    tmp_path: Path,
    proxy: PostgresProxy,
    refresh_ms: int,
    listen: str,
) -> None:
    catalog = await seed_catalog(client, admin_token)
    env = {"CRANK_MCP_LISTEN": listen}
    async with (
        run_gateway(
            proxy.url_for(database_url), tmp_path, refresh_ms=refresh_ms, extra_env=env
        ) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=10) as http,
    ):
        session_id = await open_session(http, catalog.agent_key)
        in_session = {**bearer(catalog.agent_key), "MCP-Session-Id": session_id}

        async def names() -> list[str]:
            response = await http.post(SEED_URL_PATH, json=TOOLS_LIST, headers=in_session)
            assert response.status_code == 200, response.text
            return [tool["name"] for tool in response.json()["result"]["tools"]]

        assert await names() == ["frankfurter_latest_rate"]

        await proxy.cut()

        # The session and the catalog are answered from memory, at once.
        started = time.monotonic()
        assert await names() == ["frankfurter_latest_rate"]
        assert time.monotonic() - started < 1.0

        async def degraded() -> bool:
            response = await http.get("/readyz")
            return response.status_code == 503 and response.json()["status"] == "degraded"

        await wait_until(degraded, timeout_s=10)
        ready = (await http.get("/readyz")).json()
        assert ready["database_reachable"] is False
        assert ready["snapshot_version"] > 0
        assert await names() == ["frankfurter_latest_rate"]

        # Made during the outage: the gateway cannot see either yet.
        created = await client.post(
            f"{BASE}/keys", json={"agent": "currency-rates"}, headers=auth(admin_token)
        )
        new_key = created.json()["key"]
        await publish_second_tool(client, admin_token)

        # A key the snapshot does not know cannot be checked: 503 at once, never a hang or a 401.
        started = time.monotonic()
        unknown = await http.post(SEED_URL_PATH, json=INIT, headers=bearer(new_key))
        assert unknown.status_code == 503, unknown.text
        assert unknown.headers["retry-after"].isdigit()
        assert time.monotonic() - started < 1.0
        # Ending a session needs the database: 503 at once, and the session lives on.
        started = time.monotonic()
        assert (await http.delete(SEED_URL_PATH, headers=in_session)).status_code == 503
        assert time.monotonic() - started < 1.0
        assert await names() == ["frankfurter_latest_rate"]

        await proxy.start()

        async def ready_again() -> bool:
            return (await http.get("/readyz")).status_code == 200

        await wait_until(ready_again, timeout_s=20)
        assert (await http.get("/readyz")).json()["database_reachable"] is True

        async def second_tool_visible() -> bool:
            return await names() == ["frankfurter_latest_rate", "frankfurter_rate_again"]

        await wait_until(second_tool_visible, timeout_s=10)

        async def new_key_works() -> bool:
            response = await http.post(SEED_URL_PATH, json=INIT, headers=bearer(new_key))
            return response.status_code == 200

        await wait_until(new_key_works, timeout_s=10)
        # And ending a session works again.
        assert (await http.delete(SEED_URL_PATH, headers=in_session)).status_code == 204
        if listen == "true":

            async def listening() -> bool:
                return (await http.get("/readyz")).json()["listening"] is True

            await wait_until(listening, timeout_s=10)


async def test_a_silent_network_partition_is_noticed_and_no_request_waits_for_it(
    client: Client, admin_token: str, database_url: str, tmp_path: Path, proxy: PostgresProxy
) -> None:
    """No FIN, no RST: Postgres simply stops answering. Nothing may hang on it."""
    catalog = await seed_catalog(client, admin_token)
    async with (
        run_gateway(proxy.url_for(database_url), tmp_path, refresh_ms=500) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=30) as http,
    ):
        session_id = await open_session(http, catalog.agent_key)
        in_session = {**bearer(catalog.agent_key), "MCP-Session-Id": session_id}
        proxy.freeze()
        created = await client.post(
            f"{BASE}/keys", json={"agent": "currency-rates"}, headers=auth(admin_token)
        )
        new_key = created.json()["key"]

        # Before the gateway has noticed, database work gives up after its own short deadline.
        started = time.monotonic()
        unknown = await http.post(SEED_URL_PATH, json=INIT, headers=bearer(new_key))
        assert unknown.status_code == 503, unknown.text
        assert time.monotonic() - started < 3.5
        started = time.monotonic()
        assert (await http.delete(SEED_URL_PATH, headers=in_session)).status_code == 503
        assert time.monotonic() - started < 6.5

        async def unreachable() -> bool:
            response = await http.get("/readyz")
            return response.status_code == 503 and not response.json()["database_reachable"]

        await wait_until(unreachable, timeout_s=10)
        started = time.monotonic()
        listed = await http.post(SEED_URL_PATH, json=TOOLS_LIST, headers=in_session)
        assert listed.status_code == 200
        again = await http.post(SEED_URL_PATH, json=INIT, headers=bearer(new_key))
        assert again.status_code == 503
        assert time.monotonic() - started < 1.0

        proxy.thaw()

        async def recovered() -> bool:
            if (await http.get("/readyz")).status_code != 200:
                return False
            response = await http.post(SEED_URL_PATH, json=INIT, headers=bearer(new_key))
            return response.status_code == 200

        await wait_until(recovered, timeout_s=20)


async def _first_data_line(lines: AsyncIterator[str]) -> dict[str, Any]:
    async for line in lines:
        if line.startswith("data: "):
            return dict(json.loads(line[6:]))
    raise AssertionError("the stream ended before its first event")


async def _read_to_end(lines: AsyncIterator[str]) -> None:
    async for _ in lines:
        pass


async def test_sigterm_ends_open_sse_streams_and_the_gateway_exits_promptly(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    catalog = await seed_catalog(client, admin_token)
    async with (
        run_gateway(database_url, tmp_path) as gw,
        httpx.AsyncClient(base_url=gw.url, timeout=30) as http,
    ):
        session_id = await open_session(http, catalog.agent_key)
        legacy_headers = {
            **bearer(catalog.agent_key),
            "MCP-Session-Id": session_id,
            "Accept": "text/event-stream",
        }
        listen_body = request("subscriptions/listen", {"notifications": {"toolsListChanged": True}})
        listen_headers = modern(catalog.agent_key, "subscriptions/listen")
        async with (
            http.stream("GET", SEED_URL_PATH, headers=legacy_headers) as legacy_stream,
            http.stream(
                "POST", SEED_URL_PATH, json=listen_body, headers=listen_headers
            ) as modern_stream,
        ):
            assert legacy_stream.status_code == 200
            legacy_lines, modern_lines = legacy_stream.aiter_lines(), modern_stream.aiter_lines()
            ack = await asyncio.wait_for(_first_data_line(modern_lines), timeout=10)
            assert ack["method"] == "notifications/subscriptions/acknowledged"

            # As a container runtime does: the signal goes to granian's main process only.
            started = time.monotonic()
            os.kill(gw.process.pid, signal.SIGTERM)
            async with asyncio.timeout(10):
                await asyncio.gather(_read_to_end(legacy_lines), _read_to_end(modern_lines))

            async def exited() -> bool:
                return gw.process.poll() is not None

            await wait_until(exited, timeout_s=10 - (time.monotonic() - started))
            assert gw.process.returncode == 0, gw.log()
    assert '"gateway_stopped"' in gw.log()
