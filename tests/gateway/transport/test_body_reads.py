"""Bodies that trickle or never arrive, at a real gateway process over real sockets
(mcp_gateway.transport.body_reads): a body not whole within CRANK_MCP_BODY_TIMEOUT_S
gets 408, a key past CRANK_MCP_UNFINISHED_BODIES_PER_KEY unfinished bodies gets 429
with Retry-After, both are counted in ``crank_mcp_body_refusals_total``, and calls
through the official MCP SDK pass before, beside and after them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from tests.support.api import Client
from tests.support.gateway import (
    SEED_URL_PATH,
    Catalog,
    Gateway,
    run_gateway,
    seed_catalog,
    wait_until,
)
from tests.support.metrics import served_counts, served_gauge

TIMEOUT_S = 1  # CRANK_MCP_BODY_TIMEOUT_S of the gateway under test
PER_KEY = 3  # CRANK_MCP_UNFINISHED_BODIES_PER_KEY
# The sweep runs every quarter of the timeout; the rest is slack for a loaded machine.
REFUSED_WITHIN_S = TIMEOUT_S + 2.0
BODY = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "ping"}).encode()


@pytest.fixture
async def setup(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> AsyncIterator[tuple[Catalog, Gateway]]:
    catalog = await seed_catalog(client, admin_token)
    env = {
        "CRANK_MCP_BODY_TIMEOUT_S": str(TIMEOUT_S),
        "CRANK_MCP_UNFINISHED_BODIES_PER_KEY": str(PER_KEY),
    }
    async with run_gateway(database_url, tmp_path, extra_env=env) as gateway:
        yield catalog, gateway


class Upload:
    """One POST over a raw socket: the headers announce ``BODY``'s length; the body is
    sent by the test, in pieces or not at all."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def start(cls, gateway: Gateway, key: str, path: str = SEED_URL_PATH) -> Upload:
        reader, writer = await asyncio.open_connection("127.0.0.1", gateway.port)
        head = (
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            f"Authorization: Bearer {key}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n"
        )
        writer.write(head.encode())
        await writer.drain()
        return cls(reader, writer)

    async def send(self, piece: bytes) -> None:
        self.writer.write(piece)
        await self.writer.drain()

    async def answer(self, within_s: float) -> tuple[int, dict[str, str], Any]:
        """The status, headers and JSON body of the answer, which must come within ``within_s``."""
        async with asyncio.timeout(within_s):
            status_line = await self.reader.readline()
            headers: dict[str, str] = {}
            while (line := await self.reader.readline()) not in (b"\r\n", b""):
                name, _, value = line.decode().partition(":")
                headers[name.strip().lower()] = value.strip()
            body = await self.reader.readexactly(int(headers["content-length"]))
        return int(status_line.split()[1]), headers, json.loads(body)

    async def close(self) -> None:
        self.writer.close()
        with contextlib.suppress(ConnectionError):
            await self.writer.wait_closed()


async def sdk_works(gateway: Gateway, key: str) -> None:
    """initialize, tools/list and a tools/call through the official MCP SDK."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
        transport = streamable_http_client(gateway.url + SEED_URL_PATH, http_client=http)
        async with McpClient(transport) as mcp:
            tools = await mcp.list_tools()
            assert [tool.name for tool in tools.tools] == ["frankfurter_latest_rate"]
            # Invalid arguments: a tool error, answered before any upstream is reached.
            called = await mcp.call_tool("frankfurter_latest_rate", {"base": "not a code"})
            assert called.is_error is True


async def sdk_works_other(gateway: Gateway, key: str) -> None:
    """initialize and tools/list of agent ``other`` through the official MCP SDK."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}) as http:
        url = gateway.url + "/mcp/v1/default/other"
        async with McpClient(streamable_http_client(url, http_client=http)) as mcp:
            await mcp.list_tools()


def nothing_unfinished(gateway: Gateway) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return await served_gauge(gateway.metrics_port, "crank_mcp_unfinished_bodies") == 0

    return check


async def refusals(gateway: Gateway) -> dict[str, float]:
    return await served_counts(gateway.metrics_port, "crank_mcp_body_refusals_total", "reason")


def assert_timed_out(status: int, body: Any) -> None:
    assert status == 408, body
    assert body["jsonrpc"] == "2.0"
    assert body["id"] is None
    assert body["error"]["code"] == -32600
    assert f"did not arrive within {TIMEOUT_S} s" in body["error"]["message"]


async def test_a_body_that_never_arrives_gets_408_within_the_bound(
    setup: tuple[Catalog, Gateway],
) -> None:
    catalog, gateway = setup
    await sdk_works(gateway, catalog.agent_key)
    before = await refusals(gateway)
    upload = await Upload.start(gateway, catalog.agent_key)
    started = time.monotonic()
    try:
        status, _, body = await upload.answer(REFUSED_WITHIN_S)
        elapsed = time.monotonic() - started
        # The connection is not held either: the server closes it after the answer.
        async with asyncio.timeout(2):
            assert await upload.reader.read() == b""
    finally:
        await upload.close()
    assert TIMEOUT_S <= elapsed < REFUSED_WITHIN_S
    assert_timed_out(status, body)
    after = await refusals(gateway)
    assert after["timeout"] == before["timeout"] + 1
    assert after["too_many_unfinished"] == before["too_many_unfinished"]
    assert await served_gauge(gateway.metrics_port, "crank_mcp_unfinished_bodies") == 0
    await sdk_works(gateway, catalog.agent_key)


async def test_a_trickled_body_gets_408_although_bytes_keep_coming(
    setup: tuple[Catalog, Gateway],
) -> None:
    catalog, gateway = setup
    upload = await Upload.start(gateway, catalog.agent_key)
    started = time.monotonic()

    async def trickle() -> None:  # one byte every 0.1 s: BODY would take seconds
        for byte in BODY[:-1]:
            await upload.send(bytes([byte]))
            await asyncio.sleep(0.1)

    trickler = asyncio.create_task(trickle())
    try:
        status, _, body = await upload.answer(REFUSED_WITHIN_S)
    finally:
        trickler.cancel()
        await upload.close()
    assert time.monotonic() - started < REFUSED_WITHIN_S
    assert_timed_out(status, body)
    assert (await refusals(gateway))["timeout"] >= 1


async def test_a_key_past_its_unfinished_bodies_gets_429_and_others_pass(
    setup: tuple[Catalog, Gateway],
) -> None:
    catalog, gateway = setup
    held = [await Upload.start(gateway, catalog.agent_key) for _ in range(PER_KEY)]
    try:
        await asyncio.sleep(0.2)  # the gateway has started reading each of them
        assert await served_gauge(gateway.metrics_port, "crank_mcp_unfinished_bodies") == PER_KEY
        extra = await Upload.start(gateway, catalog.agent_key)
        try:
            await extra.send(BODY)  # even a whole body: the key is at its cap
            status, headers, body = await extra.answer(REFUSED_WITHIN_S)
        finally:
            await extra.close()
        assert status == 429, body
        assert headers["retry-after"] == "1"
        assert body["error"]["code"] == -32029
        assert body["error"]["data"] == {"retry_after_s": 1}
        assert "3 request bodies still arriving" in body["error"]["message"]
        assert (await refusals(gateway))["too_many_unfinished"] == 1
        # The cap is per key: another agent's key is not held up meanwhile.
        await sdk_works_other(gateway, catalog.other_key)
        # The held bodies end in 408; then the key has its slots back.
        for upload in held:
            status, _, body = await upload.answer(REFUSED_WITHIN_S)
            assert_timed_out(status, body)
    finally:
        for upload in held:
            await upload.close()
    assert (await refusals(gateway))["timeout"] == PER_KEY
    await sdk_works(gateway, catalog.agent_key)


async def test_an_approval_decision_body_that_never_arrives_gets_408(
    setup: tuple[Catalog, Gateway],
) -> None:
    catalog, gateway = setup
    path = SEED_URL_PATH + "/approvals/approval_" + "0" * 32 + "/approve"
    upload = await Upload.start(gateway, catalog.approval_key, path)
    try:
        status, _, body = await upload.answer(REFUSED_WITHIN_S)
    finally:
        await upload.close()
    assert status == 408, body
    assert body["code"] == "request_timeout"
    assert (await refusals(gateway))["timeout"] == 1


async def test_a_client_that_goes_away_mid_body_gives_its_slot_back_without_a_408(
    setup: tuple[Catalog, Gateway],
) -> None:
    catalog, gateway = setup
    for _ in range(2):  # twice the cap in all: every slot was given back
        uploads = [await Upload.start(gateway, catalog.agent_key) for _ in range(PER_KEY)]
        for upload in uploads:
            await upload.send(BODY[:5])
            await upload.close()
        await wait_until(nothing_unfinished(gateway), timeout_s=5)
    assert await refusals(gateway) == {"timeout": 0, "too_many_unfinished": 0}
    await sdk_works(gateway, catalog.agent_key)
