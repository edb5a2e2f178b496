"""No secret reaches anything Crank shows, stores or logs.

A bearer token, a basic-auth password (from one ``user:password`` secret and
from a password secret beside a literal username) and an API key sent in the
query string, each with "/", "+", a quote and a non-ASCII letter (the key also
with "&", "=" and "#"), go through every path that can reflect them; the key
rides in the URL, which approval records and try-it keep. The upstream on
loopback echoes the secret it was sent (the password alone, for basic auth)
in every spelling of tests/support/masking.py: raw, JSON-escaped
(``\\/``, ``\\u00XX``), percent-encoded and base64, as JSON on success and
as text (with the secret straddling the cuts of the error excerpt and of the
approval text) on failure. Checked: tools/call results and tool errors (what
the model gets), approval records (``response_payload``, read with the
approval key), try-it (request, upstream and result), the call log, the
audit log and every other table (read straight from the database), and the
structlog output of the gateway and of the control plane, both run as
deployed (granian) with their output in files. No spelling may appear
anywhere.

Also here: an approved call that the worker runs shows in the call log with
its approval id and in ``crank_tool_calls_total``.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg.sql
from aiohttp import web
from prometheus_client.parser import text_string_to_metric_families

from shared.db import connect
from shared.engine.masking import MASK
from tests.support.api import auth, grant_egress
from tests.support.gateway import (
    Gateway,
    run_control_plane,
    run_gateway,
    serve_upstream,
    wait_until,
)
from tests.support.masking import leaks, spellings
from tests.support.processes import free_port
from tests.support.tool_calls import BASE, ERAS, Caller, ok, publish_agent, publish_operation

TOKEN = 'tok/en+abc"Q9-béarer'
BASIC = 'crank-user:pa/ss+w0rd"Z-bøsic'
PASSWORD = BASIC.partition(":")[2]  # what the upstream echoes for basic auth
QUERY_KEY = 'qk/ey+a&b=c#d"Q9-ключ'
PAIR_PASSWORD = 'pw/two+x"Y-ßecond'
SECRETS = [TOKEN, BASIC, PASSWORD, QUERY_KEY, PAIR_PASSWORD, f"crank-user:{PAIR_PASSWORD}"]
AGENT = "leaks"
MCP = f"/mcp/v1/default/{AGENT}"
APPROVALS = f"/v1/default/{AGENT}/approvals"
BEARER = {"type": "bearer", "secret": "ECHO_TOKEN"}
BASIC_AUTH = {"type": "basic", "secret": "ECHO_BASIC"}
BASIC_PAIR = {"type": "basic", "username": "crank-user", "password": {"secret": "ECHO_PASSWORD"}}
QUERY_AUTH = {"type": "query", "name": "api_key", "secret": "ECHO_QUERY"}
EXCERPT_WINDOW = 800  # shared.engine.response_selector: characters read for an error excerpt
UPSTREAM_TEXT_CHARS = 2000  # mcp_gateway.approvals.execution: the approval record's text


def _echoed(request: web.Request) -> str:
    """The secret the request carries: the query key, the bearer token, or the basic-auth
    password."""
    if "api_key" in request.query:
        return request.query["api_key"]
    scheme, _, value = request.headers.get("Authorization", "").partition(" ")
    if scheme == "Basic":
        return base64.b64decode(value).decode().partition(":")[2]
    return value


@dataclass
class Echo:
    """The upstream: echoes the secret in every spelling; records what it was sent."""

    port: int = field(default_factory=free_port)
    seen: list[str] = field(default_factory=list)

    async def echo(self, request: web.Request) -> web.Response:
        secret = _echoed(request)
        self.seen.append(secret)
        written = {k: v for k, v in spellings(secret).items() if k != "raw"}  # raw breaks JSON
        fields = [f'"{name}": "{spelling}"' for name, spelling in written.items()]
        fields.append(f'"{written["msgspec"]}": "the secret as a key"')
        return web.Response(text="{" + ", ".join(fields) + "}", content_type="application/json")

    async def fail(self, request: web.Request) -> web.Response:
        secret = _echoed(request)
        self.seen.append(secret)
        # The first copy straddles the error excerpt's window (the spaces collapse after the
        # cut); once it is masked, the second straddles the approval text's cut.
        first = " " * (EXCERPT_WINDOW - 5) + secret
        second = "y" * (UPSTREAM_TEXT_CHARS - 5 - (EXCERPT_WINDOW - 5) - len(MASK)) + secret
        others = " | ".join(spellings(secret).values())
        return web.Response(status=422, text=f"{first}{second} tail | {others}")


@asynccontextmanager
async def serve_echo() -> AsyncIterator[Echo]:
    echo = Echo()
    app = web.Application()
    for method in ("GET", "POST"):
        app.router.add_route(method, "/echo", echo.echo)
        app.router.add_route(method, "/fail", echo.fail)
    async with serve_upstream(app, echo.port):
        yield echo


def operation(
    name: str, method: str, path: str, port: int, auth_spec: dict[str, Any], *, approval: bool
) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Echoes the caller's credentials ({name}). Use when testing masking.",
        "input": {
            "type": "object",
            "properties": {"note": {"type": "string", "description": "Any text"}},
        },
        "request": {"method": method, "url": f"http://127.0.0.1:{port}{path}", "auth": auth_spec},
        "execution_config": {"timeout_ms": 5000, "retries": 0},
        "safety": {"approval": approval},
    }


# name → (method, path, auth, needs approval)
OPERATIONS: dict[str, tuple[str, str, dict[str, Any], bool]] = {
    "echo_token": ("GET", "/echo", BEARER, False),
    "fail_token": ("GET", "/fail", BEARER, False),
    "echo_basic": ("GET", "/echo", BASIC_AUTH, False),
    "fail_basic": ("GET", "/fail", BASIC_AUTH, False),
    "echo_basic_pair": ("GET", "/echo", BASIC_PAIR, False),
    "echo_query": ("GET", "/echo", QUERY_AUTH, False),
    "fail_query": ("GET", "/fail", QUERY_AUTH, False),
    "approve_token": ("POST", "/echo", BEARER, True),
    "approve_fail_basic": ("POST", "/fail", BASIC_AUTH, True),
    "approve_query": ("POST", "/echo", QUERY_AUTH, True),
}
DIRECT = [name for name, (*_, approval) in OPERATIONS.items() if not approval]
APPROVED = [name for name, (*_, approval) in OPERATIONS.items() if approval]
SECRET_VALUES = {
    "ECHO_TOKEN": TOKEN,
    "ECHO_BASIC": BASIC,
    "ECHO_PASSWORD": PAIR_PASSWORD,
    "ECHO_QUERY": QUERY_KEY,
}


@dataclass
class Keys:
    agent: str
    approval: str


async def publish(admin_http: httpx.AsyncClient, admin: str, port: int) -> Keys:
    """Workspace default: both secrets, every operation of OPERATIONS, agent ``leaks``."""
    h = auth(admin)
    await ok(await admin_http.post("/api/v1/workspaces", json={"slug": "default"}, headers=h))
    await grant_egress(admin_http, admin, "default", f"127.0.0.1:{port}")
    for name, value in SECRET_VALUES.items():
        await ok(await admin_http.put(f"{BASE}/secrets/{name}", json={"value": value}, headers=h))
    for name, (method, path, auth_spec, approval) in OPERATIONS.items():
        spec = operation(name, method, path, port, auth_spec, approval=approval)
        await publish_operation(admin_http, admin, spec)
    agent_key = await publish_agent(admin_http, admin, AGENT, list(OPERATIONS))
    body = {"agent": AGENT, "kind": "approval"}
    approval = await ok(await admin_http.post(f"{BASE}/keys", json=body, headers=h))
    return Keys(agent_key, approval.json()["key"])


async def run_approved(
    gateway_http: httpx.AsyncClient, caller: Caller, approval_key: str, tool: str
) -> tuple[str, httpx.Response]:
    """tools/call → approval_required, approved with the approval key, run by the worker;
    the approval id and the finished record as GET returns it."""
    asked = await caller.call("legacy", tool, {"note": "x"})
    approval_id = asked["structuredContent"]["approval_id"]
    headers = {"Authorization": f"Bearer {approval_key}"}
    decided = await gateway_http.post(
        f"{APPROVALS}/{approval_id}/approve", json={"approve": "yes"}, headers=headers
    )
    assert decided.status_code == 200, decided.text

    async def finished() -> bool:
        record = await gateway_http.get(f"{APPROVALS}/{approval_id}", headers=headers)
        return record.json()["status"] in ("completed", "failed")

    await wait_until(finished, timeout_s=15)
    return approval_id, await gateway_http.get(f"{APPROVALS}/{approval_id}", headers=headers)


async def logged_calls(database_url: str) -> list[dict[str, Any]]:
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT * FROM call_log ORDER BY id")
        return await cur.fetchall()


async def every_table(database_url: str) -> str:
    """Every row of every table but ``secrets`` (sealed values), as JSON text."""
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' AND tablename <> 'secrets'"
        )
        tables = [row["tablename"] for row in await cur.fetchall()]
        dumped = []
        for table in tables:
            query = psycopg.sql.SQL("SELECT row_to_json(t)::text AS row FROM {} t").format(
                psycopg.sql.Identifier(table)
            )
            cur = await conn.execute(query)
            dumped += [f"{table}: {row['row']}" for row in await cur.fetchall()]
    return "\n".join(dumped)


async def test_no_spelling_of_a_secret_reaches_a_result_record_row_or_log(
    admin_token: str, database_url: str, tmp_path: Path
) -> None:
    seen: dict[str, str] = {}  # where → what Crank showed, stored or logged there
    async with serve_echo() as echo:
        allow = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{echo.port}"}
        gateway_env = {**allow, "CRANK_CALL_LOG_FLUSH_MS": "100"}
        async with (
            run_control_plane(database_url, tmp_path, extra_env=allow) as control_plane,
            httpx.AsyncClient(base_url=control_plane.url, timeout=20) as admin_http,
        ):
            keys = await publish(admin_http, admin_token, echo.port)
            async with (
                run_gateway(database_url, tmp_path, extra_env=gateway_env) as gateway,
                httpx.AsyncClient(base_url=gateway.url, timeout=20) as gateway_http,
            ):
                caller = Caller(gateway_http, MCP, keys.agent)
                for era in ERAS:
                    for tool in DIRECT:
                        answer = await caller.raw(era, tool, {"note": "x"})
                        seen[f"tools/call {tool} ({era})"] = answer.text
                        result = answer.json()["result"]
                        assert result["isError"] is tool.startswith("fail"), result
                        if not result["isError"]:  # the echo arrived, masked
                            assert result["structuredContent"]["quote"] == MASK
                for tool in APPROVED:
                    _, record = await run_approved(gateway_http, caller, keys.approval, tool)
                    seen[f"approval record of {tool}"] = record.text
                    payload = record.json()["response_payload"]
                    if tool in ("approve_token", "approve_query"):
                        assert payload["base64"] == MASK
                    else:
                        text = payload["upstream_text"]
                        assert len(text) == UPSTREAM_TEXT_CHARS
                        assert text.strip().startswith(MASK)
                        assert text.endswith(MASK + "…")

                async def all_logged() -> bool:
                    return len(await logged_calls(database_url)) == 2 * len(DIRECT) + 2 * len(
                        APPROVED
                    )

                await wait_until(all_logged, timeout_s=10)
            seen["gateway log"] = gateway.log()

            for name, (method, *_) in OPERATIONS.items():
                body: dict[str, Any] = {"arguments": {"note": "x"}}
                if method != "GET":
                    body["acknowledge_side_effects"] = True
                tried = await admin_http.post(
                    f"{BASE}/operations/{name}/try", json=body, headers=auth(admin_token)
                )
                assert tried.status_code == 200, tried.text
                seen[f"try-it of {name}"] = tried.text
                report = tried.json()
                assert report["upstream"]["status"] in (200, 422)
                assert report["result"]["is_error"] is name.startswith(("fail", "approve_fail"))
            calls = await admin_http.get(f"{BASE}/calls", headers=auth(admin_token))
            audit = await admin_http.get(f"{BASE}/audit", headers=auth(admin_token))
            seen["call log API"], seen["audit log API"] = calls.text, audit.text
        seen["control plane log"] = control_plane.log()
    seen["database"] = await every_table(database_url)

    # Every secret really went out, and came back in every spelling.
    assert set(echo.seen) == {TOKEN, PASSWORD, QUERY_KEY, PAIR_PASSWORD}
    assert len(echo.seen) == 2 * len(DIRECT) + len(APPROVED) + len(OPERATIONS)
    found = {where: leaks(text, SECRETS) for where, text in seen.items()}
    assert {where: names for where, names in found.items() if names} == {}
    assert "operation_tried" in seen["control plane log"]  # the logs were captured
    assert "approval_completed" in seen["gateway log"]


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


async def tool_calls(gateway: Gateway, tool: str, outcome: str) -> float:
    async with httpx.AsyncClient() as http:
        scraped = await http.get(f"http://127.0.0.1:{gateway.metrics_port}/metrics")
    labels = frozenset({"agent": f"default/{AGENT}", "tool": tool, "outcome": outcome}.items())
    return samples(scraped.text).get(("crank_tool_calls_total", labels), 0.0)


async def test_an_approved_call_run_by_the_worker_is_in_the_call_log_and_the_metrics(
    admin_token: str, database_url: str, tmp_path: Path
) -> None:
    async with serve_echo() as echo:
        env = {
            "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{echo.port}",
            "CRANK_CALL_LOG_FLUSH_MS": "100",
        }
        async with run_control_plane(database_url, tmp_path) as control_plane:
            async with httpx.AsyncClient(base_url=control_plane.url, timeout=20) as admin_http:
                keys = await publish(admin_http, admin_token, echo.port)
            async with (
                run_gateway(database_url, tmp_path, extra_env=env) as gateway,
                httpx.AsyncClient(base_url=gateway.url, timeout=20) as gateway_http,
            ):
                caller = Caller(gateway_http, MCP, keys.agent)
                assert await tool_calls(gateway, "approve_token", "ok") == 0
                approval_id, record = await run_approved(
                    gateway_http, caller, keys.approval, "approve_token"
                )
                assert record.json()["status"] == "completed"
                assert await tool_calls(gateway, "approve_token", "approval_required") == 1
                assert await tool_calls(gateway, "approve_token", "ok") == 1

                async def both_logged() -> bool:
                    return len(await logged_calls(database_url)) == 2

                await wait_until(both_logged, timeout_s=10)
            async with httpx.AsyncClient(base_url=control_plane.url, timeout=20) as admin_http:
                listed = await admin_http.get(f"{BASE}/calls", headers=auth(admin_token))
    assert listed.status_code == 200, listed.text
    ran, asked = listed.json()["items"]  # newest first
    assert (asked["outcome"], asked["approval_id"]) == ("approval_required", approval_id)
    assert (ran["outcome"], ran["approval_id"]) == ("ok", approval_id)
    assert (ran["tool"], ran["agent"], ran["upstream_status"], ran["attempts"]) == (
        "approve_token",
        AGENT,
        200,
        1,
    )
    assert ran["key_prefix"] == asked["key_prefix"] is not None  # the agent key that asked
    assert ran["upstream_ms"] is not None
    assert ran["request_id"] != asked["request_id"]
    assert len(echo.seen) == 1
