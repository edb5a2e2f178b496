"""Waiting on the open call for an approval's decision (docs/architecture.md,
"Waiting for a decision"), through real gateway processes on one database and
the official Python SDK's progress callback: the call waits on replica A while
the approval is decided on replica B, and A learns of it by LISTEN/NOTIFY, or
by polling alone when it does not listen.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from shared.db import connect
from tests.support.api import Client, auth
from tests.support.approval_outcomes import (
    GATED,
    LINES,
    MCP,
    NOTE,
    Replica,
    Shopfront,
    arguments,
    decide,
    finished,
    gateway_env,
    record,
    replica,
)
from tests.support.approvals import Shop, fetch
from tests.support.gateway import change_agent, wait_until
from tests.support.js import require_node22
from tests.support.mcp import META, modern
from tests.support.metrics import served_gauge
from tests.support.paths import JS_DIR
from tests.support.processes import largest_descendant, memory_kib
from tests.support.tool_calls import (
    ERAS,
    Caller,
    legacy_headers,
    open_session,
    rpc,
)

APPROVAL_ID = re.compile(r"approval_[0-9a-f]{32}")
MODES = ("auto", "legacy")  # the SDK in 2026-07-28 and in the 2025 era


@dataclass
class Progress:
    """What the SDK's progress callback received."""

    seen: list[tuple[float, float | None, str | None]] = field(default_factory=list)
    first: asyncio.Event = field(default_factory=asyncio.Event)

    async def __call__(self, progress: float, total: float | None, message: str | None) -> None:
        self.seen.append((progress, total, message))
        self.first.set()

    async def approval_id(self) -> str:
        """The approval the first notification names, once it came."""
        await asyncio.wait_for(self.first.wait(), 20)
        message = self.seen[0][2] or ""
        assert "human must approve" in message, message
        found = APPROVAL_ID.search(message)
        assert found, message
        return found[0]


async def call_tool(
    gateway_url: str, key: str, mode: str, case: str, progress: Progress | None
) -> Any:
    headers = {"Authorization": f"Bearer {key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(gateway_url + MCP, http_client=http)
        async with McpClient(transport, mode=mode) as mcp:
            return await mcp.call_tool(GATED, arguments(case), progress_callback=progress)


def lines(mode: str) -> Any:
    first = LINES["lines"][:1]
    return first if mode == "auto" else {"items": first}


@pytest.fixture
async def waiting_pair(
    database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> AsyncIterator[tuple[Replica, Replica]]:
    """A (waits; a short wait, so a time-out test stays short) and B (decides)."""
    async with (
        replica(database_url, tmp_path, gateway_env(shop, CRANK_APPROVAL_WAIT_S="20")) as a,
        replica(database_url, tmp_path, gateway_env(shop)) as b,
    ):
        yield a, b


@pytest.mark.parametrize("mode", MODES)
async def test_approved_on_the_other_replica_mid_wait_the_open_call_gets_the_outcome(
    mode: str, waiting_pair: tuple[Replica, Replica], shopfront: Shopfront
) -> None:
    a, b = waiting_pair
    progress = Progress()
    call = asyncio.create_task(
        call_tool(a.gateway.url, shopfront.agent_key, mode, f"approve-{mode}", progress)
    )
    approval_id = await progress.approval_id()
    assert await served_gauge(a.gateway.metrics_port, "crank_approval_waiters") == 1
    await decide(b.http, shopfront.approval_key, approval_id, "approve")

    result = await asyncio.wait_for(call, 30)
    assert result.is_error is False
    assert result.structured_content == lines(mode)
    assert result.meta == {
        "crank/approval_id": approval_id,
        "crank/approval_status": "completed",
        "crank/truncated": True,
    }
    assert progress.seen[0][0] == 1
    delivered_at = (await record(b.http, shopfront.approval_key, approval_id))["status"]
    assert delivered_at == "completed"
    # Delivered on the open call: the repeat asks anew.
    again = await call_tool(a.gateway.url, shopfront.agent_key, mode, f"approve-{mode}", None)
    assert again.structured_content["status"] == "approval_required"
    assert again.structured_content["approval_id"] != approval_id
    assert await served_gauge(a.gateway.metrics_port, "crank_approval_waiters") == 0


async def test_denied_mid_wait_the_open_call_gets_approval_denied(
    waiting_pair: tuple[Replica, Replica], shopfront: Shopfront
) -> None:
    a, b = waiting_pair
    progress = Progress()
    call = asyncio.create_task(
        call_tool(a.gateway.url, shopfront.agent_key, "legacy", "deny", progress)
    )
    approval_id = await progress.approval_id()
    await decide(b.http, shopfront.approval_key, approval_id, "deny")
    result = await asyncio.wait_for(call, 30)
    assert result.is_error is True
    error = result.structured_content
    assert error["error_code"] == "approval_denied"
    assert NOTE in error["message"]
    assert result.meta == {"crank/approval_id": approval_id, "crank/approval_status": "denied"}


async def test_progress_keeps_coming_and_the_wait_times_out_with_the_seed_answer(
    database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> None:
    env = gateway_env(shop, CRANK_APPROVAL_WAIT_S="6")
    async with replica(database_url, tmp_path, env) as a:
        progress = Progress()
        started = time.monotonic()
        result = await call_tool(a.gateway.url, shopfront.agent_key, "auto", "late", progress)
        waited = time.monotonic() - started
        assert 6 <= waited < 14, waited
        # The seed's structure, unchanged, as the immediate answer gives it.
        immediate = await Caller(a.http, MCP, shopfront.agent_key).call(
            "modern", GATED, arguments("late")
        )
        assert result.is_error is False
        assert result.structured_content == immediate["structuredContent"]
        assert [c.text for c in result.content] == [c["text"] for c in immediate["content"]]
        assert result.meta is None
        # At once, then every 5 s: 0 s and 5 s within the 6 s wait.
        assert [p[0] for p in progress.seen] == [1, 2]
        approval_id = result.structured_content["approval_id"]
        assert all(approval_id in (p[2] or "") for p in progress.seen)

        # The approval stays; decided later, the repeat gets the outcome.
        await decide(a.http, shopfront.approval_key, approval_id, "approve")
        await finished(a.http, shopfront.approval_key, approval_id, "completed")
        later = await call_tool(a.gateway.url, shopfront.agent_key, "auto", "late", None)
        assert later.structured_content == lines("auto")
        assert later.meta["crank/approval_id"] == approval_id


async def waiting_request(http: httpx.AsyncClient, key: str, era: str, case: str) -> httpx.Request:
    """A tools/call of the gated tool with progress token 7, as a raw request."""
    params = {"name": GATED, "arguments": arguments(case)}
    if era == "modern":
        body = rpc("tools/call", {**params, "_meta": {**META, "progressToken": 7}})
        headers = modern(key, "tools/call", **{"Mcp-Name": GATED})
    else:
        body = rpc("tools/call", {**params, "_meta": {"progressToken": 7}})
        headers = legacy_headers(key, await open_session(http, MCP, key))
    return http.build_request("POST", MCP, json=body, headers=headers)


@pytest.mark.parametrize("era", ERAS)
async def test_a_client_that_leaves_cancels_only_its_wait(
    era: str, waiting_pair: tuple[Replica, Replica], shopfront: Shopfront
) -> None:
    a, b = waiting_pair
    request = await waiting_request(a.http, shopfront.agent_key, era, f"gone-{era}")
    response = await a.http.send(request, stream=True)
    assert response.headers["content-type"] == "text/event-stream"
    data = ""
    async for line in response.aiter_lines():
        if line.startswith("data: "):
            data = line.removeprefix("data: ")
            break
    note = json.loads(data)
    assert note["method"] == "notifications/progress"
    assert note["params"]["progressToken"] == 7
    found = APPROVAL_ID.search(note["params"]["message"])
    assert found
    approval_id = found[0]
    await response.aclose()

    async def no_waiters() -> bool:
        return await served_gauge(a.gateway.metrics_port, "crank_approval_waiters") == 0

    await wait_until(no_waiters)
    assert (await record(b.http, shopfront.approval_key, approval_id))["status"] == "pending"
    await decide(b.http, shopfront.approval_key, approval_id, "approve")
    await finished(b.http, shopfront.approval_key, approval_id, "completed")
    repeat = await Caller(a.http, MCP, shopfront.agent_key).call(
        era, GATED, arguments(f"gone-{era}")
    )
    assert repeat["_meta"]["crank/approval_id"] == approval_id
    assert repeat["_meta"]["crank/approval_status"] == "completed"


async def test_without_a_progress_token_the_answer_comes_at_once(
    waiting_pair: tuple[Replica, Replica], shopfront: Shopfront
) -> None:
    a, _ = waiting_pair
    for era in ERAS:
        started = time.monotonic()
        # Accept allows SSE, but no progress token: the seed's immediate JSON answer.
        result = await Caller(a.http, MCP, shopfront.agent_key).call(era, GATED, arguments(era))
        assert time.monotonic() - started < 5
        assert result["structuredContent"]["status"] == "approval_required"


async def test_polling_alone_ends_the_wait_within_its_interval(
    database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> None:
    """A does not LISTEN (as behind a transaction-pooling PgBouncer): its poll finds
    the decision made on B."""
    deaf = gateway_env(shop, CRANK_MCP_LISTEN="false")
    async with (
        replica(database_url, tmp_path, deaf) as a,
        replica(database_url, tmp_path, gateway_env(shop)) as b,
    ):
        progress = Progress()
        call = asyncio.create_task(
            call_tool(a.gateway.url, shopfront.agent_key, "auto", "polled", progress)
        )
        approval_id = await progress.approval_id()
        await decide(b.http, shopfront.approval_key, approval_id, "deny")
        decided = time.monotonic()
        result = await asyncio.wait_for(call, 30)
        assert time.monotonic() - decided < 3  # the poll runs every second
        assert result.structured_content["error_code"] == "approval_denied"


@pytest.mark.parametrize("era", ERAS)
async def test_sigterm_ends_a_wait_with_the_seed_answer_and_the_approval_stays(
    era: str, database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> None:
    async with replica(database_url, tmp_path, gateway_env(shop)) as a:
        request = await waiting_request(a.http, shopfront.agent_key, era, f"stopping-{era}")
        events: list[dict[str, Any]] = []
        async with a.http.stream(
            request.method, request.url, content=request.content, headers=request.headers
        ) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line.removeprefix("data: ")))
                    if len(events) == 1:
                        os.killpg(a.gateway.process.pid, signal.SIGTERM)
        progress, final = events
        assert progress["method"] == "notifications/progress"
        found = APPROVAL_ID.search(progress["params"]["message"])
        assert found
        structured = final["result"]["structuredContent"]
        assert structured["status"] == "approval_required"
        assert structured["approval_id"] == found[0]
        assert (await fetch(database_url, found[0]))["status"] == "pending"


async def sdk_call_stopped_mid_wait(
    replica_: Replica, key: str, mode: str, case: str, *, listed: bool, sent: list[str]
) -> Any:
    """The SDK's waiting call, its gateway sent SIGTERM once the first progress came;
    ``sent`` gets the method of every POST the SDK makes."""
    progress = Progress()

    async def record_method(request: httpx2.Request) -> None:
        if request.method == "POST":
            sent.append(json.loads(request.content)["method"])

    headers = {"Authorization": f"Bearer {key}"}
    hooks = {"request": [record_method]}
    async with httpx2.AsyncClient(headers=headers, timeout=60, event_hooks=hooks) as http:
        transport = streamable_http_client(replica_.gateway.url + MCP, http_client=http)
        async with McpClient(transport, mode=mode) as mcp:
            if listed:
                await mcp.list_tools()
            call = asyncio.create_task(
                mcp.call_tool(GATED, arguments(case), progress_callback=progress)
            )
            await progress.approval_id()
            os.killpg(replica_.gateway.process.pid, signal.SIGTERM)
            return await asyncio.wait_for(call, 30), progress


def raised(error: BaseException) -> list[BaseException]:
    """``error`` and, through exception groups, every exception in it."""
    if isinstance(error, BaseExceptionGroup):
        return [error, *(e for inner in error.exceptions for e in raised(inner))]
    return [error]


@pytest.mark.parametrize("mode", MODES)
async def test_sigterm_gives_the_sdk_the_seed_answer_as_the_call_result(
    mode: str, database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> None:
    """A host lists its tools before a model calls one; its SDK call then ends with the
    answer the stream ended with (docs/mcp-interface.md, "Waiting on the open call")."""
    async with replica(database_url, tmp_path, gateway_env(shop)) as a:
        sent: list[str] = []
        result, progress = await sdk_call_stopped_mid_wait(
            a, shopfront.agent_key, mode, f"sdk-stop-{mode}", listed=True, sent=sent
        )
        assert result.is_error is False
        assert result.structured_content["status"] == "approval_required"
        approval_id = result.structured_content["approval_id"]
        assert approval_id in (progress.seen[0][2] or "")
        assert sent[-2:] == ["tools/list", "tools/call"]
        assert (await fetch(database_url, approval_id))["status"] == "pending"


@pytest.mark.parametrize("mode", MODES)
async def test_an_sdk_that_never_listed_the_tool_fails_on_its_own_tools_list_after_the_answer(
    mode: str, database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> None:
    """The ConnectError of a call stopped mid-wait is not the stream's: the Python SDK
    validates a result against the tool's outputSchema and, for a tool it never listed,
    sends tools/list once the result has come, to a gateway that has stopped."""
    async with replica(database_url, tmp_path, gateway_env(shop)) as a:
        sent: list[str] = []
        with pytest.raises((ExceptionGroup, httpx2.ConnectError)) as caught:
            await sdk_call_stopped_mid_wait(
                a, shopfront.agent_key, mode, f"sdk-unlisted-{mode}", listed=False, sent=sent
            )
        assert any(isinstance(e, httpx2.ConnectError) for e in raised(caught.value))
        # tools/list goes out only after call_tool's result arrived (ClientSession.call_tool).
        assert sent[-2:] == ["tools/call", "tools/list"]


async def test_an_agent_may_lower_the_wait_but_not_raise_it(
    database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront, client: Client
) -> None:
    too_long = {"slug": "slow", "approval_wait_s": 3601}
    refused = await client.post(
        "/api/v1/workspaces/default/agents", json=too_long, headers=auth(shopfront.admin)
    )
    assert refused.status_code == 400
    assert "approval_wait_s" in refused.text
    await change_agent(client, shopfront.admin, {"approval_wait_s": 2}, slug="sales")
    async with replica(database_url, tmp_path, gateway_env(shop)) as a:
        progress = Progress()
        started = time.monotonic()
        result = await call_tool(a.gateway.url, shopfront.agent_key, "auto", "agent", progress)
        assert 2 <= time.monotonic() - started < 5  # the agent's 2 s, not the default 55 s
        assert result.structured_content["status"] == "approval_required"
        assert len(progress.seen) == 1


async def test_the_typescript_sdk_waits_with_reset_timeout_on_progress(
    database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> None:
    """A 7 s request time-out, the decision after 8 s: only the progress every 5 s
    (``resetTimeoutOnProgress``) keeps the call alive until the outcome comes."""
    node = require_node22()
    async with replica(database_url, tmp_path, gateway_env(shop)) as a:
        script = await asyncio.create_subprocess_exec(
            str(node),
            "call_tool_waiting_v1.mjs",
            a.gateway.url + MCP,
            shopfront.agent_key,
            GATED,
            json.dumps(arguments("ts")),
            "7000",
            cwd=JS_DIR,
            stdout=asyncio.subprocess.PIPE,
        )
        assert script.stdout is not None

        async def line() -> dict[str, Any]:
            raw = await asyncio.wait_for(script.stdout.readline(), 30)  # type: ignore[union-attr]
            value: dict[str, Any] = json.loads(raw)
            return value

        try:
            started = time.monotonic()
            first = await line()
            assert first["progress"] == 1
            found = APPROVAL_ID.search(first["message"])
            assert found
            assert (await line())["progress"] == 2
            await asyncio.sleep(max(0.0, 8 - (time.monotonic() - started)))
            await decide(a.http, shopfront.approval_key, found[0], "approve")
            last = await line()
            while "progress" in last:
                last = await line()
            assert "result" in last, last
            result = last["result"]
            assert result["isError"] is False
            assert result["structuredContent"] == lines("legacy")
            assert result["_meta"]["crank/approval_id"] == found[0]
            assert await asyncio.wait_for(script.wait(), 30) == 0
        finally:
            if script.returncode is None:
                script.kill()
                await script.wait()


async def test_two_hundred_waits_cost_little_and_end_together(
    database_url: str, tmp_path: Path, shop: Shop, shopfront: Shopfront
) -> None:
    """200 calls wait at once on one replica; the loop keeps answering /healthz, memory
    stays flat, and one statement that denies all their approvals ends every wait."""
    count = 200
    async with (
        replica(database_url, tmp_path, gateway_env(shop)) as a,
        httpx.AsyncClient(
            base_url=a.gateway.url, timeout=60, limits=httpx.Limits(max_connections=count + 10)
        ) as http,
    ):
        worker = largest_descendant(a.gateway.process.pid)
        await Caller(a.http, MCP, shopfront.agent_key).call("modern", GATED, arguments("warm"))
        before = memory_kib(worker)[0]
        responses = [
            await http.send(
                await waiting_request(http, shopfront.agent_key, "modern", f"many-{n}"),
                stream=True,
            )
            for n in range(count)
        ]

        async def all_waiting() -> bool:
            return await served_gauge(a.gateway.metrics_port, "crank_approval_waiters") == count

        await wait_until(all_waiting, timeout_s=30)
        started = time.monotonic()
        assert (await a.http.get("/healthz")).status_code == 200
        stall_ms = (time.monotonic() - started) * 1000
        grown_kib = memory_kib(worker)[0] - before
        async with await connect(database_url, autocommit=True) as conn:
            await conn.execute(
                "UPDATE approvals SET status = 'denied', decided_at = now() "
                "WHERE status = 'pending'"
            )
        decided = time.monotonic()

        async def last_event(response: httpx.Response) -> dict[str, Any]:
            data = [line async for line in response.aiter_lines() if line.startswith("data: ")]
            await response.aclose()
            value: dict[str, Any] = json.loads(data[-1].removeprefix("data: "))
            return value

        finals = await asyncio.gather(*(last_event(r) for r in responses))
        ended_s = time.monotonic() - decided
        codes = {f["result"]["structuredContent"].get("error_code") for f in finals}
        assert codes == {"approval_denied"}
        assert ended_s < 10, ended_s
        assert stall_ms < 500, stall_ms
        assert grown_kib < 40_000, grown_kib  # measured: see the closing note
        print(
            f"waits={count} healthz_ms={stall_ms:.1f} rss_growth_kib={grown_kib} end_s={ended_s:.2f}"
        )
