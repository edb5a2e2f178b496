"""tools/call against upstreams that misbehave on purpose, through a real gateway.

One gateway process serves the module. Its upstreams are local test servers
on 127.0.0.1: an aiohttp app that answers each behaviour (slow, 429 with
Retry-After, 500 then 200, 503, a huge body, non-JSON, redirects to other
loopback addresses ...), a raw TCP server that resets or speaks no HTTP, a
decoy on a port that is *not* allowlisted (it must never see a request), and
an allowlisted port where nothing listens. Only 127.0.0.1:<upstream> and
127.0.0.1:<raw> are allowlisted (CRANK_UPSTREAM_ALLOWLIST), as `crank up`
does for its demo API. Every host these tests name is loopback, so a broken
guard could only ever reach this machine; metadata, private and public
addresses are tested at the guard's decision in tests/shared/test_outbound_guard.py.

Every upstream error body carries ``MARK``; no answer of the gateway may
contain it (never a raw upstream dump).

Error codes of the safety flows are tested where those flows are
(test_confirmation.py, test_idempotency.py in this folder), and
``approval_denied``/``approval_expired`` where a repeat call gets an approval's
outcome (tests/gateway/approvals/test_outcome_delivery.py): ``ELSEWHERE``.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from email.utils import formatdate
from typing import Any
from urllib.parse import unquote

import httpx
import httpx2
import psycopg
import pytest
from aiohttp import web
from litestar import Litestar
from litestar.testing import AsyncTestClient
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client

from shared.engine.errors import ERROR_CODES
from tests.support.api import auth, grant_egress, make_token
from tests.support.db import database_url_for, reset_database
from tests.support.gateway import Gateway, run_gateway
from tests.support.processes import free_port
from tests.support.tool_calls import (
    BASE,
    ERAS,
    Caller,
    assert_tool_error,
    ok,
    publish_agent,
    publish_operation,
)

PATH = "/mcp/v1/default/misbehave"
MARK = "UPSTREAM-BODY-MARK-5e1f"
RAW_LIMIT = (
    10 * 1024 * 1024
)  # the default ceiling of every raw limit (CRANK_UPSTREAM_MAX_RESPONSE_BYTES)
ELSEWHERE = frozenset(
    {
        "confirmation_required",
        "confirmation_invalid",
        "confirmation_declined",  # test_elicitation.py
        "idempotency_conflict",
        "idempotency_in_progress",
        "approval_denied",
        "approval_expired",
    }
)


@dataclass
class Recorder:
    """Every request the local servers received: (server, raw path, Host header)."""

    seen: list[tuple[str, str, str]] = field(default_factory=list)

    def hits(self, nonce: str, server: str | None = None) -> int:
        return sum(
            1
            for name, raw, _ in self.seen
            if raw.rstrip("/").endswith("/" + nonce) and server in (None, name)
        )


@dataclass
class Ports:
    upstream: int
    raw: int
    decoy: int  # listening, never allowlisted
    closed: int  # allowlisted, nothing listens


def _error_body(status: int, headers: dict[str, str] | None = None) -> web.Response:
    return web.json_response(
        {"error": MARK, "detail": f"{MARK} stack trace and secrets"}, status=status, headers=headers
    )


class Misbehaving:
    """The aiohttp upstream: GET /b/{behaviour}/{nonce}, and anything else recorded."""

    def __init__(self, recorder: Recorder, ports: Ports) -> None:
        self.recorder, self.ports = recorder, ports
        self.release = asyncio.Event()

    async def any(self, request: web.Request) -> web.StreamResponse:
        self.recorder.seen.append(("upstream", request.raw_path, request.host))
        parts = request.path.split("/")
        if len(parts) == 4 and parts[1] == "b":
            return await self.behave(request, parts[2], parts[3])
        return web.json_response({"raw_path": request.raw_path})

    async def behave(self, request: web.Request, behaviour: str, nonce: str) -> web.StreamResponse:
        count = self.recorder.hits(nonce, "upstream")
        port = self.ports.upstream
        if behaviour == "ok":
            return web.json_response({"ok": True, "attempt": count, "noise": MARK})
        if behaviour.startswith("status-"):
            status = int(behaviour.split("-")[1])
            if behaviour == "status-429":
                return _error_body(429, {"Retry-After": "30"})
            if behaviour == "status-429-date":
                return _error_body(429, {"Retry-After": formatdate(time.time() + 90, usegmt=True)})
            if behaviour == "status-503-later":
                return _error_body(503, {"Retry-After": "120"})
            return _error_body(status)
        if behaviour.startswith("flaky-"):  # the first attempt fails, the retry succeeds
            if count == 1:
                return _error_body(int(behaviour.split("-")[1]))
            return web.json_response({"ok": True, "attempt": count})
        if behaviour == "slow":
            await asyncio.wait_for(self.release.wait(), 5)
            return web.json_response({"ok": True, "attempt": count})
        if behaviour == "huge":
            return await self.huge(request)
        if behaviour == "long":
            return web.json_response({"ok": "x" * 100_000, "attempt": count})
        if behaviour == "html":
            return web.Response(text=f"<html><body>{MARK}</body></html>", content_type="text/html")
        targets = {
            "redirect-same": f"/b/ok/{nonce}",
            "redirect-loopback2": f"http://127.0.0.2:{port}/b/ok/{nonce}",
            "redirect-ipv6": f"http://[::1]:{port}/b/ok/{nonce}",
            "redirect-numeric": f"http://2130706433:{port}/b/ok/{nonce}",
            "redirect-port": f"http://127.0.0.1:{self.ports.decoy}/b/ok/{nonce}",
            "redirect-localhost": f"http://localhost:{self.ports.decoy}/b/ok/{nonce}",
        }
        if behaviour in targets:
            return web.Response(status=302, headers={"Location": targets[behaviour]}, text=MARK)
        return web.Response(status=400, text=f"unknown behaviour {behaviour}")

    async def huge(self, request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        chunk = (MARK * (65536 // len(MARK) + 1)).encode()[:65536]
        try:
            for _ in range(RAW_LIMIT // len(chunk) + 16):
                await response.write(chunk)
            await response.write_eof()
        except ConnectionResetError:  # the gateway stops reading at its limit
            pass
        return response


async def raw_server(recorder: Recorder) -> asyncio.Server:
    """Speaks TCP, not always HTTP: /reset/ resets, /garbage/ answers no HTTP, /hangup/ closes."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
            target = head.split(b" ")[1].decode()
            recorder.seen.append(("raw", target, ""))
            if target.startswith("/reset/"):
                sock = writer.get_extra_info("socket")
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                writer.transport.abort()
                return
            if target.startswith("/garbage/"):
                writer.write(f"SSH-2.0-{MARK}\r\n\r\n{MARK}".encode())
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError, TimeoutError):
            pass
        writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _op(name: str, url: str, *, properties: dict[str, Any], **extra: Any) -> dict[str, Any]:
    required = [p for p in properties if p != "optional"]
    return {
        "name": name,
        "description": f"Gets a test answer ({name}). Use when a test asks for it.",
        "input": {
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": False,
        },
        "request": {"method": "GET", "url": url},
        "response": {"select": "{ok: ok, attempt: attempt}"},
        "execution_config": {"timeout_ms": 3000, "retries": 1},
        **extra,
    }


NONCE = {"type": "string", "pattern": "^[a-z0-9-]{1,80}$", "description": "Unique call id"}
BEHAVIOURS = [
    "ok",
    *(f"status-{s}" for s in (302, 400, 401, 403, 404, 408, 409, 410, 418, 422, 500, 501)),
    *(f"status-{s}" for s in (502, 503, 504)),
    "status-429",
    "status-429-date",
    "status-503-later",
    "flaky-500",
    "flaky-503",
    "huge",
    "long",
    "html",
    "redirect-same",
    "redirect-loopback2",
    "redirect-ipv6",
    "redirect-numeric",
    "redirect-port",
    "redirect-localhost",
]


def operations(ports: Ports) -> list[dict[str, Any]]:
    up = f"http://127.0.0.1:{ports.upstream}"
    nonce_only = {"nonce": NONCE}
    probe_props = {
        "behaviour": {"type": "string", "enum": BEHAVIOURS, "description": "What to do"},
        "nonce": NONCE,
    }
    raw_props = {
        "behaviour": {"type": "string", "enum": ["reset", "garbage", "hangup"], "description": "x"},
        "nonce": NONCE,
    }
    secret_url = f"{up}/b/ok/{{nonce}}"
    return [
        _op("probe", f"{up}/b/{{behaviour}}/{{nonce}}", properties=probe_props),
        _op(
            "slow_probe",
            f"{up}/b/slow/{{nonce}}",
            properties=nonce_only,
            execution_config={"timeout_ms": 300, "retries": 1},
        ),
        _op(
            "raw_probe",
            f"http://127.0.0.1:{ports.raw}/{{behaviour}}/{{nonce}}",
            properties=raw_props,
        ),
        _op("refused_probe", f"http://127.0.0.1:{ports.closed}/x/{{nonce}}", properties=nonce_only),
        _op("blocked_probe", f"http://127.0.0.1:{ports.decoy}/x/{{nonce}}", properties=nonce_only),
        _op(
            "localhost_blocked",
            f"http://localhost:{ports.decoy}/x/{{nonce}}",
            properties=nonce_only,
        ),
        _op(
            "localhost_allowed",
            f"http://localhost:{ports.upstream}/b/ok/{{nonce}}",
            properties=nonce_only,
        ),
        _op(
            "numeric_host",
            f"http://2130706433:{ports.upstream}/b/ok/{{nonce}}",
            properties=nonce_only,
        ),
        _op(
            "secret_gone",
            secret_url,
            properties=nonce_only,
            request={
                "method": "GET",
                "url": secret_url,
                "auth": {"type": "bearer", "secret": "gone_token"},
            },
        ),
        _op(
            "secret_crlf",
            secret_url,
            properties=nonce_only,
            request={
                "method": "GET",
                "url": secret_url,
                "auth": {"type": "header", "name": "X-Api-Key", "secret": "crlf_token"},
            },
        ),
        _op(
            "broken_select",
            f"{up}/b/ok/{{nonce}}",
            properties=nonce_only,
            response={"select": "abs(ok)"},
        ),
        _op(
            "broken_mapping",
            f"{up}/b/ok/{{nonce}}",
            properties={"nonce": NONCE, "count": {"type": "integer", "description": "A count"}},
            request={
                "method": "GET",
                "url": f"{up}/b/ok/{{nonce}}",
                "query": {"n": "length(count)"},  # a type error at run time, on valid arguments
            },
        ),
        {
            "name": "get_order",
            "description": "Gets one order by id. Use when a test escapes a path.",
            "input": {
                "type": "object",
                "properties": {"order_id": {"type": "string", "description": "Any text at all"}},
                "required": ["order_id"],
            },
            "request": {"method": "GET", "url": f"{up}/orders/{{order_id}}"},
            "execution_config": {"timeout_ms": 3000, "retries": 0},
        },
    ]


@dataclass
class World:
    gateway: Gateway
    ports: Ports
    recorder: Recorder
    caller: Caller
    key: str


@pytest.fixture(scope="module")
async def world(
    pg_server_url: str, run_database: str, app: Litestar, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    """The run's database used directly (as tests.support.js.seeded_gateway does):
    no test here may use the function-scoped ``database_url``."""
    url = database_url_for(pg_server_url, run_database)
    with psycopg.connect(url, autocommit=True) as conn:
        reset_database(conn, run_database)
    recorder = Recorder()
    raw = await raw_server(recorder)
    ports = Ports(free_port(), raw.sockets[0].getsockname()[1], free_port(), free_port())
    upstream = Misbehaving(recorder, ports)

    async def decoy(request: web.Request) -> web.Response:
        recorder.seen.append(("decoy", request.raw_path, request.host))
        return web.json_response({"decoy": MARK})

    runners: list[web.AppRunner] = []
    for port, handler in ((ports.upstream, upstream.any), (ports.decoy, decoy)):
        server_app = web.Application()
        server_app.router.add_route("*", "/{tail:[\\s\\S]*}", handler)  # CR/LF too
        runner = web.AppRunner(server_app, access_log=None, handler_cancellation=True)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", port).start()
        runners.append(runner)

    admin = await make_token(url, "admin")
    specs = operations(ports)
    async with AsyncTestClient(app=app) as client:
        await ok(
            await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=auth(admin))
        )
        allowlisted = (ports.upstream, ports.raw, ports.closed)
        await grant_egress(client, admin, "default", *(f"127.0.0.1:{p}" for p in allowlisted))
        for name, value in (("gone_token", "s3cr3t-gone"), ("crlf_token", "abc\r\nX-Evil: 1")):
            await ok(
                await client.put(
                    f"{BASE}/secrets/{name}", json={"value": value}, headers=auth(admin)
                )
            )
        for spec in specs:
            await publish_operation(client, admin, spec)
        # The operation was published with its secret; the secret is gone since.
        await ok(await client.delete(f"{BASE}/secrets/gone_token", headers=auth(admin)))
        key = await publish_agent(client, admin, "misbehave", [s["name"] for s in specs])

    env = {
        "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{ports.upstream},127.0.0.1:{ports.raw},"
        f"127.0.0.1:{ports.closed}",
        "CRANK_RATE_LIMIT": "off",
    }
    try:
        async with (
            run_gateway(url, tmp_path_factory.mktemp("tool-errors"), extra_env=env) as gateway,
            httpx.AsyncClient(base_url=gateway.url, timeout=30) as http,
        ):
            yield World(gateway, ports, recorder, Caller(http, PATH, key), key)
    finally:
        upstream.release.set()
        for runner in runners:
            await runner.cleanup()
        raw.close()
        await raw.wait_closed()


@dataclass(frozen=True)
class Case:
    """One upstream behaviour and what the model must get back."""

    id: str
    tool: str
    code: str | None  # None: a successful call
    behaviour: str | None = None
    extra: tuple[tuple[str, Any], ...] = ()
    retry_after: Callable[[int], bool] | None = None
    hits: int | None = None  # requests that reached the upstreams with this nonce

    def arguments(self, nonce: str) -> dict[str, Any]:
        args: dict[str, Any] = {"nonce": nonce, **dict(self.extra)}
        if self.behaviour is not None:
            args["behaviour"] = self.behaviour
        return args


def probe(id_: str, code: str | None, **kw: Any) -> Case:
    return Case(id_, "probe", code, behaviour=kw.pop("behaviour", id_), **kw)


CASES = [
    # success, also after a retry and through a same-origin redirect
    probe("ok", None, hits=1),
    probe("flaky-500", None, hits=2),
    probe("flaky-503", None, hits=2),
    probe("redirect-same", None, hits=2),
    Case("localhost-allowed", "localhost_allowed", None, hits=1),
    # invalid_arguments: nothing is sent
    probe("bad-enum", "invalid_arguments", behaviour="teapot", hits=0),
    Case("unknown-argument", "probe", "invalid_arguments", "ok", (("extra", 1),), hits=0),
    Case("missing-argument", "broken_mapping", "invalid_arguments", hits=0),
    # upstream statuses
    probe("status-429", "upstream_rate_limited", retry_after=lambda s: s == 30, hits=1),
    probe("status-429-date", "upstream_rate_limited", retry_after=lambda s: 80 <= s <= 90, hits=1),
    probe("status-503-later", "upstream_unavailable", retry_after=lambda s: s == 120, hits=1),
    probe("status-502", "upstream_unavailable", hits=2),
    probe("status-503", "upstream_unavailable", hits=2),
    probe("status-504", "upstream_unavailable", hits=2),
    probe("status-500", "upstream_error", hits=2),
    probe("status-501", "upstream_error", hits=1),
    probe("status-400", "upstream_bad_request", hits=1),
    probe("status-418", "upstream_bad_request", hits=1),
    probe("status-422", "upstream_bad_request", hits=1),
    probe("status-401", "upstream_auth_failed", hits=1),
    probe("status-403", "upstream_auth_failed", hits=1),
    probe("status-404", "upstream_not_found", hits=1),
    probe("status-410", "upstream_not_found", hits=1),
    probe("status-409", "upstream_conflict", hits=1),
    probe("status-408", "upstream_timeout", hits=1),
    probe("status-302", "upstream_response_invalid", hits=1),  # a redirect with no Location
    # transport failures
    Case("slow", "slow_probe", "upstream_timeout"),
    Case("refused", "refused_probe", "upstream_unavailable", hits=0),
    # (aiohttp itself may try a reset GET once more on a fresh connection: no exact count)
    Case("reset", "raw_probe", "upstream_unavailable", "reset"),
    Case("hangup", "raw_probe", "upstream_unavailable", "hangup"),
    Case("garbage", "raw_probe", "upstream_response_invalid", "garbage", hits=1),
    # unreadable or oversized answers
    probe("html", "upstream_response_invalid", hits=1),
    Case("select-type-error", "broken_select", "upstream_response_invalid", hits=1),
    probe("huge", "upstream_response_too_large", hits=1),
    probe("long", "upstream_response_too_large", hits=1),
    # the guard: never a packet to the decoy, loopback or not
    Case("port-not-allowlisted", "blocked_probe", "upstream_blocked", hits=0),
    Case("localhost-not-allowlisted", "localhost_blocked", "upstream_blocked", hits=0),
    Case("numeric-host", "numeric_host", "upstream_blocked", hits=0),
    probe("redirect-loopback2", "upstream_blocked", hits=1),
    probe("redirect-ipv6", "upstream_blocked", hits=1),
    probe("redirect-numeric", "upstream_blocked", hits=1),
    probe("redirect-port", "upstream_blocked", hits=1),
    probe("redirect-localhost", "upstream_blocked", hits=1),
    # credentials
    Case("secret-deleted", "secret_gone", "secret_missing", hits=0),
    Case("secret-with-crlf", "secret_crlf", "secret_missing", hits=0),
    # a fault on Crank's side: the operation's query mapping fails on valid arguments
    Case("mapping-type-error", "broken_mapping", "internal_error", extra=(("count", 3),), hits=0),
]


def test_every_error_code_is_covered_or_listed_as_not_yet_producible() -> None:
    covered = {case.code for case in CASES if case.code is not None}
    assert covered.isdisjoint(ELSEWHERE)
    assert covered | ELSEWHERE == set(ERROR_CODES)
    assert len({case.id for case in CASES}) == len(CASES)


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_each_upstream_behaviour_gives_its_structured_result(
    world: World, case: Case, era: str
) -> None:
    nonce = f"{case.id}-{era}"
    response = await world.caller.raw(era, case.tool, case.arguments(nonce))
    assert MARK not in response.text  # never a raw upstream dump
    assert "Traceback" not in response.text
    result = await world.caller.call(era, case.tool, case.arguments(nonce + "-again"))
    if case.code is None:
        assert result["isError"] is False, result
        assert result["structuredContent"] == {"ok": True, "attempt": case.hits}
    else:
        error = assert_tool_error(result, case.code)
        if case.retry_after is None:
            assert "retry_after_s" not in error
        else:
            assert case.retry_after(error["retry_after_s"]), error
    if case.hits is not None:
        assert world.recorder.hits(nonce + "-again") == case.hits, world.recorder.seen[-5:]
    assert world.recorder.hits(nonce, "decoy") == 0
    assert world.recorder.hits(nonce + "-again", "decoy") == 0


async def test_request_ids_differ_between_calls(world: World) -> None:
    ids = set()
    for era in ERAS:
        for n in range(3):
            result = await world.caller.call(
                era, "probe", {"behaviour": "status-404", "nonce": f"ids-{era}-{n}"}
            )
            ids.add(assert_tool_error(result, "upstream_not_found")["request_id"])
    assert len(ids) == 6


# Sent, percent-encoded, as one segment.
ESCAPES = [
    "?admin=1",
    "x?y=1&z=2",
    "#frag",
    "a#b",
    "@evil.test",
    ":8080",
    " spaced ",
    "a;b=c",
    "%",
    "50%25",
    "ünïcødé",
]
# Refused before anything is sent: a "/" or "\\" (also percent-encoded, which an
# upstream may decode before it normalises), a dot segment, a control character.
TRAVERSALS = [
    "",
    ".",
    "..",
    "../admin",
    "../../etc/passwd",
    "%2e%2e",
    "%2e%2e%2fadmin",
    "..%2f..%2fadmin",
    ".%2e",
    "%252e%252e",
    "...",
    "a/../../admin",
    "a/b",
    "a%2Fb",
    "a%2fb",
    "..\\admin",
    "a\r\nHost: evil.test",
    "a\r\n\r\nGET /admin HTTP/1.1",
    "%0d%0aX-Injected:%201",
    "//evil.test/x",
    "http://evil.test/",
    "..;/admin",
    "ünïcødé/..",
    "\x00",
]


@pytest.mark.parametrize("value", ESCAPES)
async def test_a_path_argument_never_leaves_its_segment(world: World, value: str) -> None:
    before = len(world.recorder.seen)
    result = await world.caller.call("legacy", "get_order", {"order_id": value})
    new = world.recorder.seen[before:]
    assert result["isError"] is False, result
    assert len(new) == 1, new
    server, raw_path, host = new[0]
    assert (server, host) == ("upstream", f"127.0.0.1:{world.ports.upstream}")
    assert result["structuredContent"] == {"raw_path": raw_path}
    prefix, _, segment = raw_path.partition("/orders/")
    assert prefix == ""
    assert not any(c in segment for c in "/?#\\ \r\n\x00"), raw_path
    assert unquote(segment) == value  # the whole value, as one segment, nothing else


@pytest.mark.parametrize("value", TRAVERSALS)
async def test_path_values_that_could_traverse_are_refused(world: World, value: str) -> None:
    before = len(world.recorder.seen)
    result = await world.caller.call("modern", "get_order", {"order_id": value})
    error = assert_tool_error(result, "invalid_arguments")
    assert "order_id" in error["message"]
    assert world.recorder.seen[before:] == []


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_sdk_receives_a_structured_tool_error(world: World, mode: str) -> None:
    nonce = f"sdk-{mode}"
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {world.key}"}) as http:
        transport = streamable_http_client(world.gateway.url + PATH, http_client=http)
        async with McpClient(transport, mode=mode) as mcp:
            called = await mcp.call_tool("probe", {"behaviour": "status-429", "nonce": nonce})
    assert called.is_error is True
    error = called.structured_content
    assert error is not None
    assert error["error_code"] == "upstream_rate_limited"
    assert (error["recoverable"], error["retry_after_s"]) == (True, 30)
    assert error["request_id"].startswith("req_")
    text = [block.text for block in called.content if block.type == "text"]
    assert len(text) == 1
    assert MARK not in text[0]
    assert Counter(s for s, raw, _ in world.recorder.seen if raw.endswith(nonce)) == {"upstream": 1}
