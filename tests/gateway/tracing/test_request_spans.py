"""The server span of each request to the MCP endpoint (shared.tracing.RequestTrace),
in process (tests/support/transport.py) with a real database for key look-ups: its
name and attributes, and which incoming context is its parent."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest
from opentelemetry.trace import SpanKind, StatusCode
from psycopg_pool import AsyncConnectionPool

from shared import tracing
from shared.db import Connection, open_pool
from shared.principals import PrincipalRecord
from tests.support.tracing import Parent, only, recording
from tests.support.transport import Transport, build_transport, call

PATH = "/mcp/v1/default/sales"
MODERN_VERSION = "2026-07-28"


@pytest.fixture
async def transport(database_url: str) -> AsyncIterator[Transport]:
    pool: AsyncConnectionPool[Connection] = await open_pool(
        database_url, max_size=2, autocommit=True
    )
    try:
        yield build_transport(pool)
    finally:
        await pool.close()


def rpc(method: str, params: dict[str, Any]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode()


def modern(transport: Transport, method: str, name: str | None = None) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {transport.key('sales', 'agent')}",
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN_VERSION,
        "Mcp-Method": method,
    }
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def meta(**extra: str) -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
        "io.modelcontextprotocol/clientCapabilities": {},
        **extra,
    }


async def test_a_request_is_a_server_span_under_the_http_traceparent(
    transport: Transport,
) -> None:
    caller = Parent()
    headers = {
        "Authorization": f"Bearer {transport.key('sales', 'agent')}",
        "Content-Type": "application/json",
        "traceparent": caller.traceparent,
    }
    initialize = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {}}
    with recording() as spans:
        answer = await call(transport.state, "POST", PATH, headers, rpc("initialize", initialize))
    assert answer.status == 200
    span = only(spans.get_finished_spans(), "initialize")
    assert span.kind is SpanKind.SERVER
    assert span.parent is not None
    assert span.parent.is_remote
    assert (span.context.trace_id, span.parent.span_id) == (caller.trace_id, caller.span_id)
    attributes = dict(span.attributes or {})
    assert str(attributes.pop("crank.request_id")).startswith("req_")
    key_id = attributes.pop("crank.key_id")  # who called: the agent key's id, never the key
    assert isinstance(key_id, int)
    assert key_id > 0
    assert attributes == {
        "network.protocol.name": "http",
        "network.transport": "tcp",
        "mcp.method.name": "initialize",
        "jsonrpc.request.id": "7",
        "crank.workspace": "default",
        "crank.agent": "default/sales",
        "http.response.status_code": 200,
    }
    assert span.status.status_code is StatusCode.UNSET


async def test_a_traceparent_in_meta_is_the_parent_and_the_header_a_link(
    transport: Transport,
) -> None:
    in_meta, in_header = Parent(), Parent()
    headers = modern(transport, "tools/list") | {"traceparent": in_header.traceparent}
    body = rpc("tools/list", {"_meta": meta(traceparent=in_meta.traceparent)})
    with recording() as spans:
        answer = await call(transport.state, "POST", PATH, headers, body)
    assert answer.status == 200
    span = only(spans.get_finished_spans(), "tools/list")
    assert span.parent is not None
    assert (span.context.trace_id, span.parent.span_id) == (in_meta.trace_id, in_meta.span_id)
    assert [(link.context.trace_id, link.context.span_id) for link in span.links] == [
        (in_header.trace_id, in_header.span_id)
    ]
    assert span.attributes is not None
    assert span.attributes["mcp.protocol.version"] == MODERN_VERSION


async def test_without_any_traceparent_the_request_starts_a_trace(transport: Transport) -> None:
    body = rpc("tools/list", {"_meta": meta()})
    with recording() as spans:
        await call(transport.state, "POST", PATH, modern(transport, "tools/list"), body)
    span = only(spans.get_finished_spans(), "tools/list")
    assert span.parent is None


async def test_an_unknown_tool_marks_the_span_with_the_json_rpc_error(
    transport: Transport,
) -> None:
    body = rpc("tools/call", {"name": "nope", "arguments": {}, "_meta": meta()})
    with recording() as spans:
        answer = await call(
            transport.state, "POST", PATH, modern(transport, "tools/call", "nope"), body
        )
    code = json.loads(answer.body)["error"]["code"]
    span = only(spans.get_finished_spans(), "tools/call")
    assert span.attributes is not None
    assert span.attributes["error.type"] == str(code)
    assert span.attributes["rpc.response.status_code"] == str(code)
    assert "gen_ai.tool.name" not in span.attributes  # a name the agent does not have
    assert span.status.status_code is StatusCode.ERROR


async def test_a_refused_key_still_gets_a_span_without_agent_or_request_id(
    transport: Transport,
) -> None:
    caller = Parent()
    headers = {
        "Authorization": "Bearer crk_not_a_key",
        "Content-Type": "application/json",
        "traceparent": caller.traceparent,
    }
    with recording() as spans:
        answer = await call(transport.state, "POST", PATH, headers, rpc("tools/list", {}))
    code = json.loads(answer.body)["error"]["code"]
    span = only(spans.get_finished_spans(), "POST")
    assert span.parent is not None
    assert span.parent.span_id == caller.span_id
    attributes = dict(span.attributes or {})
    assert attributes["http.response.status_code"] == answer.status
    assert attributes["error.type"] == str(code)
    assert not {"crank.agent", "crank.request_id", "mcp.method.name"} & attributes.keys()


def test_a_persons_request_span_names_issuer_subject_and_client_never_a_key() -> None:
    """What the endpoint sets for a token's caller (``RequestTrace.requester``)."""
    person = PrincipalRecord(
        issuer="https://idp.example.com", subject="dana", name="Dana Ng", client_id="desk-app"
    )
    with recording() as spans:
        trace = tracing.RequestTrace(lambda name: None)
        trace.requester(None, person)
        trace.finish("POST", "acme", "shop", "req_0123456789abcdef")
    span = only(spans.get_finished_spans(), "POST")
    attributes = dict(span.attributes or {})
    assert {
        k: v for k, v in attributes.items() if k.startswith(("crank.principal", "crank.c"))
    } == {
        "crank.principal.issuer": "https://idp.example.com",
        "crank.principal.subject": "dana",
        "crank.client_id": "desk-app",
    }
    assert "crank.key_id" not in attributes
    # The display name is the log's and the records', not the span's.
    assert "Dana Ng" not in attributes.values()
