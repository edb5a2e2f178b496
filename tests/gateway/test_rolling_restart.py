"""A rolling restart under load (docs/architecture.md, "Shutdown"): two real
gateway replicas on one database, a load generator sending tools/call to both
(plain calls, idempotent retries, approval-gated calls answered at once),
clients holding open SSE waits for their approval (``progressToken``) in both
protocol eras on both, and an approver approving calls whose upstream holds the first request, so a
replica's worker holds an executing lease when it is told to stop.

Replica X (the one whose worker holds the first slow call) gets SIGTERM, as a
container runtime sends it (to granian's main process only), while a call of
its is in flight at the upstream; it exits and is started again; then replica Y likewise, while the load goes on against the
live one. "Accepted" is a request whose HTTP response started (status line and
headers received): one refused or reset before that never reached the
gateway's pipeline as far as the client can tell, so the load client sends it
to the next replica, as a load balancer does. Asserted:

- every accepted request got its whole answer, HTTP 200 with a JSON-RPC
  result: no reset mid-answer, no 5xx; the call in flight at SIGTERM too;
- every SSE wait open on a stopping replica ends with the seed's
  ``approval_required`` answer for its approval, as the last event of a
  complete stream, and its approval stays pending; a DELETE waiting for the
  human's form (2025 session) ends ``confirmation_declined``;
- the approval a stopping worker held is handed back at once (never left
  ``executing`` by the exited process to wait out its lease), the other
  replica runs it (attempt 2, the same idempotency key) and the upstream
  answers it exactly once;
- each replica exits with code 0, within the bound docs/deploy.md gives for
  ``terminationGracePeriodSeconds``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import re
import signal
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tests.support.api import Client
from tests.support.approval_outcomes import (
    DIRECT,
    GATED,
    LINES,
    MCP,
    Shopfront,
    arguments,
    decide,
    gateway_env,
    set_up_shopfront,
)
from tests.support.approvals import Shop, fetch, owner_pid, runs_in, serve_shop
from tests.support.gateway import Gateway, change_agent, run_gateway, wait_until
from tests.support.mcp import META, modern
from tests.support.orders import order_operation
from tests.support.tool_calls import (
    LEGACY_VERSION,
    legacy_headers,
    open_session,
    publish_operation,
    rpc,
)

GRACE_S = 2  # CRANK_APPROVAL_SHUTDOWN_GRACE_S: shorter than the held upstream call
CALL_S = 20  # the operations' longest call: timeout_ms, no retries (order_spec)
# docs/deploy.md: terminationGracePeriodSeconds of at least the longest call, the
# grace, and 15 s.
EXIT_BOUND_S = CALL_S + GRACE_S + 15
IN_FLIGHT_S = 3.0  # how late the upstream answers the call in flight at SIGTERM
LOAD_WORKERS = 3
APPROVAL_ID = re.compile(r"approval_[0-9a-f]{32}")
DELETE = "cancel_order"  # a DELETE: confirmed by the human's form in a 2025 session


@dataclass
class Slot:
    """One replica of the pair; ``gateway`` is None while it is down."""

    name: str
    gateway: Gateway | None = None
    served: int = 0  # accepted requests this slot answered


@dataclass
class Load:
    """The load generator's record."""

    accepted: Counter[str] = field(default_factory=Counter)  # by kind
    not_accepted: int = 0  # refused or reset before the response started: sent elsewhere
    broken: list[str] = field(default_factory=list)  # accepted, then not answered whole
    stop: asyncio.Event = field(default_factory=asyncio.Event)


def _call_body(kind: str, n: int) -> dict[str, Any]:
    if kind == "plain":
        params = {"name": DIRECT, "arguments": arguments(f"plain-{n}")}
    elif kind == "idempotent":  # one key and one set of arguments, sent again and again
        params = {"name": DIRECT, "arguments": arguments("same-key")}
    else:  # approval-gated, no progress token: approval_required at once
        params = {"name": GATED, "arguments": arguments(f"gated-{n}")}
    return rpc("tools/call", {**params, "_meta": META}, id_=n)


def _answered_whole(kind: str, status: int, body: bytes) -> str | None:
    """What is wrong with an accepted answer, or None."""
    if status != 200:
        return f"{kind}: HTTP {status} {body[:200]!r}"
    try:
        result = json.loads(body)["result"]
    except (ValueError, KeyError):
        return f"{kind}: not a JSON-RPC result {body[:200]!r}"
    structured = result.get("structuredContent") or {}
    if kind == "gated":
        ok = structured.get("status") == "approval_required"
    elif kind == "idempotent":  # a retry racing the first call may hear it is still running
        ok = not result["isError"] or structured.get("error_code") == "idempotency_in_progress"
    else:
        ok = not result["isError"]
    return None if ok else f"{kind}: {result}"


class CutMidAnswer(Exception):
    """An accepted request whose answer did not arrive whole."""


async def _post(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, bytes] | None:
    """(status, body) of an accepted request; None when it was refused or reset before
    its response started."""
    try:
        async with http.stream("POST", url, json=body, headers=headers) as answer:
            try:
                return answer.status_code, await answer.aread()
            except httpx.HTTPError as exc:
                raise CutMidAnswer(repr(exc)) from exc
    except httpx.TransportError:
        return None


async def _send_one(
    http: httpx.AsyncClient, slots: list[Slot], kind: str, n: int, load: Load
) -> None:
    """Send one call, to the next live replica that accepts it."""
    body = _call_body(kind, n)
    key = http.headers["Authorization"].removeprefix("Bearer ")
    headers = modern(key, "tools/call", **{"Mcp-Name": body["params"]["name"]})
    for attempt in itertools.count():
        slot = slots[(n + attempt) % len(slots)]
        if slot.gateway is None:  # down: the load balancer has taken it out
            await asyncio.sleep(0.05)
            continue
        try:
            answered = await _post(http, slot.gateway.url + MCP, body, headers)
        except CutMidAnswer as exc:
            load.broken.append(f"{kind} on {slot.name}: cut mid-answer ({exc})")
            return
        if answered is None:
            load.not_accepted += 1
            await asyncio.sleep(0.02)
            continue
        slot.served += 1
        load.accepted[kind] += 1
        if (wrong := _answered_whole(kind, *answered)) is not None:
            load.broken.append(f"on {slot.name}: {wrong}")
        return


async def _generate(key: str, slots: list[Slot], load: Load, worker: int) -> None:
    kinds = ("plain", "idempotent", "gated")
    async with httpx.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60) as http:
        for n in itertools.count(worker, LOAD_WORKERS):
            if load.stop.is_set():
                return
            await _send_one(http, slots, kinds[n % len(kinds)], n, load)


@dataclass
class Wait:
    """One tools/call waiting on an open SSE answer for its approval."""

    slot: str
    case: str
    approval_id: str
    events: list[dict[str, Any]]
    reader: asyncio.Task[None]


async def open_stream(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[list[dict[str, Any]], asyncio.Task[None]]:
    """POST ``body`` for an SSE answer; returns once its first event arrived: the events
    so far (the list grows) and the task that reads the rest."""
    events: list[dict[str, Any]] = []
    first = asyncio.Event()

    async def read() -> None:
        async with http.stream("POST", url, json=body, headers=headers) as answer:
            assert answer.headers["content-type"] == "text/event-stream", await answer.aread()
            async for line in answer.aiter_lines():  # a cut stream raises here
                if line.startswith("data: "):
                    events.append(json.loads(line.removeprefix("data: ")))
                    first.set()

    reader = asyncio.create_task(read())
    await asyncio.wait_for(first.wait(), 20)
    return events, reader


async def open_wait(
    http: httpx.AsyncClient, key: str, slot: Slot, case: str, era: str = "modern"
) -> Wait:
    """A gated tools/call with a progress token on ``slot``, in ``era``; returns once its
    first progress notification (which names the approval) arrived."""
    assert slot.gateway is not None
    url = slot.gateway.url + MCP
    params = {"name": GATED, "arguments": arguments(case)}
    if era == "modern":
        body = rpc("tools/call", {**params, "_meta": {**META, "progressToken": case}})
        headers = modern(key, "tools/call", **{"Mcp-Name": GATED})
    else:
        body = rpc("tools/call", {**params, "_meta": {"progressToken": case}})
        headers = legacy_headers(key, await open_session(http, url, key))
    events, reader = await open_stream(http, url, body, headers)
    progress = events[0]
    assert progress["method"] == "notifications/progress"
    found = APPROVAL_ID.search(progress["params"]["message"])
    assert found, progress
    return Wait(slot.name, case, found[0], events, reader)


async def open_form(
    http: httpx.AsyncClient, key: str, slot: Slot
) -> tuple[list[dict[str, Any]], asyncio.Task[None]]:
    """A DELETE in a 2025 session that declared elicitation, on ``slot``: returns once
    the human's form (``elicitation/create``) is on its stream, unanswered."""
    assert slot.gateway is not None
    url = slot.gateway.url + MCP
    init = {
        "protocolVersion": LEGACY_VERSION,
        "capabilities": {"elicitation": {}},
        "clientInfo": {"name": "tests", "version": "1"},
    }
    opened = await http.post(url, json=rpc("initialize", init, id_=1), headers=legacy_headers(key))
    assert opened.status_code == 200, opened.text
    body = rpc(
        "tools/call", {"name": DELETE, "arguments": {"order_id": f"form-{slot.name.lower()}"}}
    )
    headers = legacy_headers(key, opened.headers["mcp-session-id"])
    events, reader = await open_stream(http, url, body, headers)
    assert events[0]["method"] == "elicitation/create", events
    return events, reader


async def declined_on_shutdown(form: tuple[list[dict[str, Any]], asyncio.Task[None]]) -> None:
    """The form's call ended whole with confirmation_declined (architecture, "Shutdown")."""
    events, reader = form
    await asyncio.wait_for(reader, 20)
    _, final = events
    assert final["result"]["structuredContent"]["error_code"] == "confirmation_declined", final


async def ended_with_seed_answer(wait: Wait) -> None:
    """The wait's stream ended whole, its last event the seed's approval_required."""
    await asyncio.wait_for(wait.reader, 20)
    final = wait.events[-1]
    assert final["result"]["structuredContent"]["status"] == "approval_required", final
    assert final["result"]["structuredContent"]["approval_id"] == wait.approval_id
    assert all(e["method"] == "notifications/progress" for e in wait.events[:-1])


@asynccontextmanager
async def started(
    slot: Slot, database_url: str, tmp_path: Path, env: dict[str, str]
) -> AsyncIterator[Gateway]:
    async with run_gateway(database_url, tmp_path, extra_env=env) as gateway:
        slot.gateway = gateway
        try:
            yield gateway
        finally:
            slot.gateway = None


async def stop(slot: Slot) -> tuple[int, float]:
    """SIGTERM to granian's main process, as a container runtime sends it; the exit
    code and the seconds it took."""
    gateway = slot.gateway
    assert gateway is not None
    began = time.monotonic()
    os.kill(gateway.process.pid, signal.SIGTERM)
    code = await asyncio.to_thread(gateway.process.wait, EXIT_BOUND_S)
    slot.gateway = None
    return code, time.monotonic() - began


async def in_flight(shop: Shop, key: str, slot: Slot, case: str) -> asyncio.Task[httpx.Response]:
    """A direct call on ``slot`` that the upstream answers ``IN_FLIGHT_S`` late; returns
    once the upstream has it, so it is in flight."""
    assert slot.gateway is not None
    url = slot.gateway.url + MCP
    body = rpc("tools/call", {"name": DIRECT, "arguments": arguments(case), "_meta": META})
    shop.delay_s[str(arguments(case)["request_id"])] = IN_FLIGHT_S

    async def call() -> httpx.Response:
        async with httpx.AsyncClient(timeout=60) as http:
            return await http.post(
                url, json=body, headers=modern(key, "tools/call", **{"Mcp-Name": DIRECT})
            )

    sent = asyncio.create_task(call())

    async def arrived() -> bool:
        return any(seen.body["item"] == f"sku-{case}" for seen in shop.seen)

    await wait_until(arrived, timeout_s=20)
    return sent


async def answered_in_full(sent: asyncio.Task[httpx.Response]) -> None:
    answer = await asyncio.wait_for(sent, 30)
    assert answer.status_code == 200, answer.text
    result = answer.json()["result"]
    assert result["isError"] is False, result
    assert result["structuredContent"] == LINES["lines"][:1]


async def stop_with_a_call_in_flight(
    shop: Shop, key: str, slot: Slot, exits: list[tuple[str, int, float]]
) -> Gateway:
    """SIGTERM ``slot`` while a call is in flight there, which must get its whole answer;
    its exit recorded in ``exits``. The stopped gateway."""
    gateway = slot.gateway
    assert gateway is not None
    probe = await in_flight(shop, key, slot, f"in-flight-{slot.name}")
    code, took = await stop(slot)
    exits.append((slot.name, code, took))
    await answered_in_full(probe)
    return gateway


async def restart(
    stack: AsyncExitStack, slot: Slot, database_url: str, tmp_path: Path, env: dict[str, str]
) -> None:
    """Start ``slot`` again; returns once the load reaches it."""
    await stack.enter_async_context(started(slot, database_url, tmp_path, env))
    before = slot.served
    await wait_until(_served_since(slot, before), timeout_s=30)


async def held_by(shop: Shop, key: str, database_url: str, approval_id: str) -> int:
    """Once the upstream holds the approval's first request: the pid running it."""

    async def arrived() -> bool:
        return any(seen.key == key for seen in shop.seen)

    await wait_until(arrived, timeout_s=20)
    row = await fetch(database_url, approval_id)
    assert (row["status"], row["attempt"]) == ("executing", 1)
    return await owner_pid(database_url, approval_id)


async def approve_slow(shop: Shop, front: Shopfront, wait: Wait, on: Slot) -> str:
    """Approve ``wait``'s call on replica ``on``; the upstream holds its first request.
    Its idempotency key."""
    assert on.gateway is not None
    key = str(arguments(wait.case)["request_id"])
    shop.hold_first.add(key)
    async with httpx.AsyncClient(base_url=on.gateway.url, timeout=20) as http:
        await decide(http, front.approval_key, wait.approval_id, "approve")
    return key


async def handed_back_and_completed_once(
    database_url: str, shop: Shop, key: str, approval_id: str, stopped: Gateway, runner: Slot
) -> None:
    # The exited process left no lease behind: the row went back to approved at once.
    row = await fetch(database_url, approval_id)
    assert not (row["status"] == "executing" and row["attempt"] == 1), row

    async def completed() -> bool:
        return bool((await fetch(database_url, approval_id))["status"] == "completed")

    await wait_until(completed, timeout_s=20)
    row = await fetch(database_url, approval_id)
    assert row["attempt"] == 2  # the handed-back attempt counted
    assert runner.gateway is not None
    assert runs_in(runner.gateway, await owner_pid(database_url, approval_id))
    assert [seen.key for seen in shop.seen].count(key) == 2  # sent again, with the same key
    assert shop.answered[key] == 1  # and answered once
    assert '"approval_released"' in stopped.log()
    assert "Traceback" not in stopped.log()


async def test_a_rolling_restart_under_load_loses_no_accepted_request_and_hands_back_leases(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    async with serve_shop() as shop, AsyncExitStack() as stack:
        front = await set_up_shopfront(client, admin_token, shop, timeout_ms=CALL_S * 1000)
        url = f"http://127.0.0.1:{shop.port}/orders/{{order_id}}"
        await publish_operation(client, admin_token, order_operation(DELETE, "DELETE", url))
        await change_agent(client, admin_token, {"operations": [GATED, DIRECT, DELETE]}, "sales")
        env = gateway_env(
            shop, CRANK_APPROVAL_SHUTDOWN_GRACE_S=str(GRACE_S), CRANK_APPROVAL_WAIT_S="300"
        )
        slots = [Slot("A"), Slot("B")]
        for slot in slots:
            await stack.enter_async_context(started(slot, database_url, tmp_path, env))
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=60))
        load = Load()
        generators = [
            asyncio.create_task(_generate(front.agent_key, slots, load, worker))
            for worker in range(LOAD_WORKERS)
        ]
        exits: list[tuple[str, int, float]] = []
        try:
            await wait_until(lambda: _served_each(slots), timeout_s=30)
            # Waits in both eras on both replicas.
            waits = [  # the first one's approval will run slowly
                await open_wait(http, front.agent_key, slot, f"wait-{slot.name}-{era}", era)
                for slot in slots
                for era in ("modern", "legacy")
            ]
            slow_key = await approve_slow(shop, front, waits[0], slots[0])
            pid = await held_by(shop, slow_key, database_url, waits[0].approval_id)
            assert slots[0].gateway is not None
            x, y = slots if runs_in(slots[0].gateway, pid) else slots[::-1]

            form = await open_form(http, front.agent_key, x)
            stopped_x = await stop_with_a_call_in_flight(shop, front.agent_key, x, exits)
            await declined_on_shutdown(form)
            for wait in waits:  # the slow call's wait too, if it was on X
                if wait.slot == x.name:
                    await ended_with_seed_answer(wait)
            await handed_back_and_completed_once(
                database_url, shop, slow_key, waits[0].approval_id, stopped_x, y
            )
            if waits[0].slot == y.name:  # waited on Y, where it ran: the outcome came
                await asyncio.wait_for(waits[0].reader, 20)
                meta = waits[0].events[-1]["result"]["_meta"]
                assert meta["crank/approval_status"] == "completed", waits[0].events[-1]
            # X is down: Y's worker alone can take the next slow call.
            second = await open_wait(http, front.agent_key, y, f"wait-{y.name}-2")
            slow_key_2 = await approve_slow(shop, front, second, y)
            pid = await held_by(shop, slow_key_2, database_url, second.approval_id)
            assert y.gateway is not None
            assert runs_in(y.gateway, pid)

            await restart(stack, x, database_url, tmp_path, env)
            stopped_y = await stop_with_a_call_in_flight(shop, front.agent_key, y, exits)
            await ended_with_seed_answer(second)
            for wait in waits[1:]:  # the slow call's wait ended in the first round
                if wait.slot == y.name:
                    await ended_with_seed_answer(wait)
            await handed_back_and_completed_once(
                database_url, shop, slow_key_2, second.approval_id, stopped_y, x
            )
            await restart(stack, y, database_url, tmp_path, env)
        finally:
            load.stop.set()
            await asyncio.gather(*generators)

    assert load.broken == []
    assert [code for _, code, _ in exits] == [0, 0], exits
    assert all(took < EXIT_BOUND_S for _, _, took in exits), exits
    assert set(load.accepted) == {"plain", "idempotent", "gated"}
    # The waits that stayed open kept their approvals pending.
    for wait in waits[1:]:
        assert (await fetch(database_url, wait.approval_id))["status"] == "pending"


async def _served_each(slots: list[Slot]) -> bool:
    return all(slot.served > 0 for slot in slots)


def _served_since(slot: Slot, before: int) -> Callable[[], Awaitable[bool]]:
    """A predicate: ``slot`` answered more than ``before`` accepted requests."""

    async def more() -> bool:
        return slot.served > before

    return more
