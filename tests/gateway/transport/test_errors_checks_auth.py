"""The transport's one error type, one request check for both protocol eras, and one
authentication for the MCP endpoint and the approval-key endpoints, in process
(tests/support/transport.py) with a real database for key look-ups."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.transport.errors import ProtocolError
from shared.db import Connection, open_pool
from shared.keys import KeyKind, generate_key
from tests.support.transport import (
    ALLOWED_ORIGIN,
    MAX_BODY_BYTES,
    Answer,
    Transport,
    build_transport,
    call,
)

MCP = "/mcp/v1/default/{slug}"
APPROVALS = "/v1/default/{slug}/approvals"
MODERN_VERSION = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool[Connection]]:
    opened = await open_pool(database_url, max_size=2, autocommit=True)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def transport(pool: AsyncConnectionPool[Connection]) -> Transport:
    return build_transport(pool)


def rpc(method: str, params: dict[str, Any] | None = None, id_: int | None = 7) -> bytes:
    message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if id_ is not None:
        message["id"] = id_
    return json.dumps(message).encode()


def rpc_error(answer: Answer) -> tuple[int, int, Any]:
    """(HTTP status, JSON-RPC code, id) of a JSON-RPC error answer."""
    body = json.loads(answer.body)
    return answer.status, body["error"]["code"], body["id"]


# --- the one error type, rendered in each endpoint's shape ---------------------------------


def test_a_protocol_error_renders_as_a_json_rpc_error_with_its_id_and_data() -> None:
    problem = ProtocolError(
        429,
        "rate limit exceeded",
        code=-32029,
        data={"retry_after_s": 3},
        headers={"Retry-After": "3"},
        rpc_id="call-1",
    )
    assert json.loads(problem.jsonrpc_body()) == {
        "jsonrpc": "2.0",
        "id": "call-1",
        "error": {"code": -32029, "message": "rate limit exceeded", "data": {"retry_after_s": 3}},
    }
    assert problem.headers == {"Retry-After": "3"}


def test_a_refusal_before_any_json_rpc_is_minus_32001_with_a_null_id() -> None:
    body = json.loads(ProtocolError(401, "missing or invalid API key").jsonrpc_body())
    assert body == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32001, "message": "missing or invalid API key"},
    }


def test_a_protocol_error_without_a_json_rpc_code_answers_no_body() -> None:
    assert ProtocolError(405, "method not allowed", code=None).jsonrpc_body() == b""


@pytest.mark.parametrize(
    ("status", "name"),
    [
        (400, "bad_request"),
        (401, "unauthorized"),
        (403, "forbidden"),
        (404, "not_found"),
        (405, "method_not_allowed"),
        (413, "body_too_large"),
        (415, "unsupported_media_type"),
        (500, "internal_error"),
        (503, "unavailable"),
    ],
)
def test_a_protocol_error_renders_as_code_and_message_on_the_approval_endpoints(
    status: int, name: str
) -> None:
    body = json.loads(ProtocolError(status, "why").problem_body())
    assert body == {"code": name, "message": "why"}


def test_a_named_protocol_error_carries_its_name_and_its_data_as_fields() -> None:
    problem = ProtocolError(409, "not pending", name="not_pending", data={"status": "denied"})
    assert json.loads(problem.problem_body()) == {
        "code": "not_pending",
        "message": "not pending",
        "status": "denied",
    }


# --- one request check for both protocol eras ----------------------------------------------


def era_headers(transport: Transport, era: str, **extra: str) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {transport.key('sales', 'agent')}",
        "Content-Type": "application/json",
    }
    if era == "modern":
        headers |= {"MCP-Protocol-Version": MODERN_VERSION, "Mcp-Method": "server/discover"}
    return headers | extra


def era_body(era: str) -> bytes:
    if era == "modern":
        return rpc("server/discover", {"_meta": META})
    return rpc("initialize", {"protocolVersion": "2025-06-18", "capabilities": {}})


@pytest.mark.parametrize("era", ["legacy", "modern"])
@pytest.mark.parametrize(
    ("case", "status", "code"),
    [
        ("Content-Type is not JSON", 400, -32600),
        ("Accept allows neither JSON nor SSE", 400, -32600),
        ("the body is over the limit", 413, -32600),
        ("the body is not JSON", 400, -32700),
        ("the body is not a JSON-RPC message", 400, -32600),
    ],
)
async def test_both_eras_refuse_a_bad_post_with_the_same_status_and_code(
    transport: Transport, era: str, case: str, status: int, code: int
) -> None:
    headers, body = era_headers(transport, era), era_body(era)
    if case == "Content-Type is not JSON":
        headers["Content-Type"] = "text/plain"
    elif case == "Accept allows neither JSON nor SSE":
        headers["Accept"] = "text/html"
    elif case == "the body is over the limit":
        body = body + b" " * MAX_BODY_BYTES
    elif case == "the body is not JSON":
        body = b"{nope"
    elif case == "the body is not a JSON-RPC message":
        body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": ""}).encode()
    answer = await call(transport.state, "POST", MCP.format(slug="sales"), headers, body)
    refused_status, refused_code, rpc_id = rpc_error(answer)
    assert (refused_status, refused_code) == (status, code)
    # The id is answered once the message shows one.
    assert rpc_id == (7 if case == "the body is not a JSON-RPC message" else None)


async def test_a_well_formed_post_passes_the_checks_in_both_eras(transport: Transport) -> None:
    for era in ("legacy", "modern"):
        answer = await call(
            transport.state,
            "POST",
            MCP.format(slug="sales"),
            era_headers(transport, era),
            era_body(era),
        )
        assert answer.status == 200, (era, answer.body)
        assert answer.headers["content-type"] == "application/json"
        assert json.loads(answer.body)["id"] == 7


async def test_a_client_that_accepts_only_event_streams_gets_one_event_in_both_eras(
    transport: Transport,
) -> None:
    for era in ("legacy", "modern"):
        headers = era_headers(transport, era, Accept="text/event-stream")
        answer = await call(
            transport.state, "POST", MCP.format(slug="sales"), headers, era_body(era)
        )
        assert answer.status == 200, (era, answer.body)
        assert answer.headers["content-type"] == "text/event-stream"
        data = [line for line in answer.body.decode().splitlines() if line.startswith("data: ")]
        assert json.loads(data[0][6:])["id"] == 7


async def test_only_a_2025_03_26_session_takes_a_batch(transport: Transport) -> None:
    path, state = MCP.format(slug="sales"), transport.state
    batch = b"[" + rpc("ping", id_=1) + b"," + rpc("ping", id_=2) + b"]"
    for version, status in (("2025-03-26", 200), ("2025-06-18", 400)):
        session = state.sessions.issue(10, 1, version)  # sales's agent key, agent sales
        headers = era_headers(transport, "legacy", **{"MCP-Session-Id": session})
        answer = await call(state, "POST", path, headers, batch)
        assert answer.status == status, (version, answer.body)
        if status == 200:
            assert [item["id"] for item in json.loads(answer.body)] == [1, 2]
        else:
            assert rpc_error(answer) == (400, -32600, None)
    modern = await call(state, "POST", path, era_headers(transport, "modern"), batch)
    assert rpc_error(modern) == (400, -32600, None)


# --- one authentication for the MCP endpoint and the approval-key endpoints -------------------

AUTH_CASES = [
    ("no key", 401),
    ("malformed key", 401),
    ("unknown key", 401),
    ("key cannot be checked now", 503),
    ("unknown agent", 404),
    ("unpublished agent", 404),
    ("another agent's key", 403),
    ("the other kind of key", 403),
    ("disallowed Origin", 403),
]
NAMES = {401: "unauthorized", 403: "forbidden", 404: "not_found", 503: "unavailable"}


def situation(transport: Transport, case: str, kind: str, path: str) -> tuple[str, dict[str, str]]:
    """The path and headers of ``case`` on an endpoint that takes keys of ``kind``."""
    other_kind = "approval" if kind == "agent" else "agent"
    slug, token = "sales", transport.key("sales", kind)
    extra: dict[str, str] = {}
    if case in ("unknown key", "key cannot be checked now"):
        token = generate_key(KeyKind(kind))
    elif case == "malformed key":
        token = "not-a-key"
    elif case == "unknown agent":
        slug = "nobody"
    elif case == "unpublished agent":
        slug, token = "draft", transport.key("draft", kind)
    elif case == "another agent's key":
        token = transport.key("other", kind)
    elif case == "the other kind of key":
        token = transport.key("sales", other_kind)
    elif case == "disallowed Origin":
        extra["Origin"] = "https://evil.example.net"
    headers = {"Content-Type": "application/json", **extra}
    if case != "no key":
        headers["Authorization"] = f"Bearer {token}"
    return path.format(slug=slug), headers


@pytest.mark.parametrize(("case", "status"), AUTH_CASES)
async def test_the_mcp_and_the_approval_endpoints_answer_a_key_situation_alike(
    pool: AsyncConnectionPool[Connection], case: str, status: int
) -> None:
    transport = build_transport(pool, keys_reachable=case != "key cannot be checked now")
    mcp_path, mcp_headers = situation(transport, case, "agent", MCP)
    mcp = await call(transport.state, "POST", mcp_path, mcp_headers, era_body("legacy"))
    approvals_path, approvals_headers = situation(transport, case, "approval", APPROVALS)
    approvals = await call(transport.state, "GET", approvals_path, approvals_headers)

    assert (mcp.status, approvals.status) == (status, status)
    assert rpc_error(mcp) == (status, -32001, None)
    assert json.loads(approvals.body)["code"] == NAMES[status]
    for answer in (mcp, approvals):
        if status == 401:
            assert answer.headers["www-authenticate"] == "Bearer"
        if status == 503:
            assert answer.headers["retry-after"] == "2"
    assert "access-control-allow-origin" not in approvals.headers


async def test_the_right_key_passes_both_endpoints_and_an_allowed_origin_gets_cors(
    transport: Transport,
) -> None:
    mcp_path, mcp_headers = situation(transport, "right key", "agent", MCP)
    mcp = await call(transport.state, "POST", mcp_path, mcp_headers, era_body("legacy"))
    assert mcp.status == 200, mcp.body
    path, headers = situation(transport, "right key", "approval", APPROVALS)
    listed = await call(transport.state, "GET", path, {**headers, "Origin": ALLOWED_ORIGIN})
    assert listed.status == 200, listed.body
    assert json.loads(listed.body) == {"items": [], "next_cursor": None}
    assert listed.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
    refused = await call(transport.state, "GET", path, {"Origin": ALLOWED_ORIGIN})
    assert refused.status == 401
    assert refused.headers["access-control-allow-origin"] == ALLOWED_ORIGIN
