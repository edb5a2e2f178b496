"""A real gateway process with tracing on, exporting over OTLP/HTTP to a receiver on
loopback: the spans arrive with their names, attributes and parents, and the upstream
receives the client span's context. Clients: httpx with a ``traceparent`` header
(the 2025 era) and the official SDK, which puts its context in ``params._meta``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import httpx2
from mcp import Client as McpClient
from mcp.client.streamable_http import streamable_http_client
from opentelemetry import context, trace
from opentelemetry.proto.trace.v1.trace_pb2 import Span as SpanProto
from opentelemetry.proto.trace.v1.trace_pb2 import Status as StatusProto

from shared.principals import PrincipalRecord
from tests.support.api import Client
from tests.support.approvals import TOOL, Shop, insert_approved, publish_shop, serve_shop
from tests.support.gateway import Gateway, run_gateway
from tests.support.mcp import bearer
from tests.support.processes import free_port
from tests.support.rates import PATH, Upstream, call_body, open_session_at, seed, serve_rates
from tests.support.tracing import (
    Parent,
    Receiver,
    otlp_receiver,
    traceparent_ids,
)

UPSTREAM_SPAN = "GET /v1/latest"
TOOL_SPAN = "tools/call latest_rate"


def tracing_env(receiver: Receiver, upstream_port: int) -> dict[str, str]:
    return {
        "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream_port}",
        "CRANK_OTEL_ENABLED": "true",
        "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
        "OTEL_BSP_SCHEDULE_DELAY": "100",  # export within a tenth of a second
        "NO_PROXY": "127.0.0.1",
        "no_proxy": "127.0.0.1",
    }


@dataclass
class Traced:
    receiver: Receiver
    gateway: Gateway
    upstream: Upstream
    key: str  # of agent rates


@asynccontextmanager
async def traced_gateway(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> AsyncIterator[Traced]:
    """The rates agent on a gateway process exporting to an OTLP receiver on loopback."""
    async with serve_rates() as upstream, otlp_receiver() as receiver:
        key = await seed(client, admin_token, upstream.port, free_port())
        env = tracing_env(receiver, upstream.port)
        async with run_gateway(database_url, tmp_path, extra_env=env) as gateway:
            yield Traced(receiver, gateway, upstream, key)


async def test_a_traced_call_exports_its_request_and_upstream_spans_with_their_parents(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    caller = Parent()
    async with (
        traced_gateway(client, admin_token, database_url, tmp_path) as traced,
        httpx.AsyncClient(base_url=traced.gateway.url, timeout=20) as http,
    ):
        key, receiver, upstream = traced.key, traced.receiver, traced.upstream
        session = {**bearer(key), "MCP-Session-Id": await open_session_at(http, key)}
        answer = await http.post(
            PATH,
            json=call_body("latest_rate", {"base": "USD", "quote": "EUR"}),
            headers=session | {"traceparent": caller.traceparent},
        )
        assert answer.json()["result"]["isError"] is False
        spans = await receiver.arrived(TOOL_SPAN, UPSTREAM_SPAN, "initialize")

    served, sent = spans[TOOL_SPAN], spans[UPSTREAM_SPAN]
    assert served.kind == SpanProto.SPAN_KIND_SERVER
    assert (served.trace_id, served.parent_span_id) == (caller.trace_id, caller.span_id)
    assert served.service_name == "crank-gateway"
    request_id = served.attributes.pop("crank.request_id")
    assert str(request_id).startswith("req_")
    assert served.attributes.pop("crank.key_id") > 0  # who called: the agent key
    assert served.attributes == {
        "network.protocol.name": "http",
        "network.transport": "tcp",
        "mcp.method.name": "tools/call",
        "jsonrpc.request.id": "3",
        "gen_ai.tool.name": "latest_rate",
        "gen_ai.operation.name": "execute_tool",
        "crank.tool_version": 1,
        "crank.outcome": "ok",
        "crank.workspace": "default",
        "crank.agent": "default/rates",
        "http.response.status_code": 200,
    }
    assert sent.kind == SpanProto.SPAN_KIND_CLIENT
    assert (sent.trace_id, sent.parent_span_id) == (caller.trace_id, served.span_id)
    assert sent.attributes["url.template"] == "/v1/latest"
    assert sent.attributes["http.response.status_code"] == 200
    assert upstream.traceparents[-1] is not None
    assert traceparent_ids(upstream.traceparents[-1]) == (caller.trace_id, sent.span_id)
    every_value = " ".join(str(v) for span in spans.values() for v in span.attributes.values())
    assert "USD" not in every_value  # no argument values (nor the key) in any span
    assert key not in every_value


async def test_the_official_sdk_context_in_meta_parents_the_gateway_span(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    caller = Parent()
    async with (
        traced_gateway(client, admin_token, database_url, tmp_path) as traced,
        httpx2.AsyncClient(headers={"Authorization": f"Bearer {traced.key}"}) as http,
    ):
        receiver, upstream, gateway = traced.receiver, traced.upstream, traced.gateway
        # The SDK injects the current context into params._meta (no provider here: its
        # span is the caller's context itself).
        token = context.attach(trace.set_span_in_context(caller.span()))
        try:
            transport = streamable_http_client(gateway.url + PATH, http_client=http)
            async with McpClient(transport, mode="auto") as mcp:
                called = await mcp.call_tool("latest_rate", {"base": "USD", "quote": "EUR"})
                assert called.is_error is False
        finally:
            context.detach(token)
        spans = await receiver.arrived(TOOL_SPAN, UPSTREAM_SPAN)

    served, sent = spans[TOOL_SPAN], spans[UPSTREAM_SPAN]
    assert (served.trace_id, served.parent_span_id) == (caller.trace_id, caller.span_id)
    assert served.attributes["mcp.protocol.version"] == "2026-07-28"
    assert sent.parent_span_id == served.span_id
    assert upstream.traceparents[-1] is not None
    assert traceparent_ids(upstream.traceparents[-1]) == (caller.trace_id, sent.span_id)


async def test_an_approved_call_run_by_the_worker_is_a_span_of_its_own_with_its_upstream_call(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    shop: Shop
    async with serve_shop() as shop, otlp_receiver() as receiver:
        await publish_shop(client, admin_token, shop.port)
        env = tracing_env(receiver, shop.port)
        async with run_gateway(database_url, tmp_path, extra_env=env):
            person = PrincipalRecord(
                issuer="https://idp.example.com", subject="dana", name="Dana", client_id="desk"
            )
            (approval_id,) = await insert_approved(database_url, notify=True, person=person)
            spans = await receiver.arrived(f"approval {TOOL}", "POST /orders")

    run, sent = spans[f"approval {TOOL}"], spans["POST /orders"]
    assert run.parent_span_id is None  # the call that asked ended long ago: a trace of its own
    assert run.attributes["crank.approval_id"] == approval_id
    assert run.attributes["crank.outcome"] == "ok"
    assert run.attributes["gen_ai.tool.name"] == TOOL
    # Who asked for it, from the approval row (a person: no key).
    assert run.attributes["crank.principal.issuer"] == "https://idp.example.com"
    assert run.attributes["crank.principal.subject"] == "dana"
    assert run.attributes["crank.client_id"] == "desk"
    assert "crank.key_id" not in run.attributes
    assert (sent.trace_id, sent.parent_span_id) == (run.trace_id, run.span_id)
    assert sent.attributes["http.response.status_code"] == shop.status


async def test_a_failed_call_marks_both_spans_with_cranks_error_code(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    async with (
        traced_gateway(client, admin_token, database_url, tmp_path) as traced,
        httpx.AsyncClient(base_url=traced.gateway.url, timeout=20) as http,
    ):
        session = {**bearer(traced.key), "MCP-Session-Id": await open_session_at(http, traced.key)}
        # blocked_rate's upstream is outside the egress policy: refused before any connect.
        answer = await http.post(
            PATH, json=call_body("blocked_rate", {"base": "USD", "quote": "EUR"}), headers=session
        )
        code = answer.json()["result"]["structuredContent"]["error_code"]
        spans = await traced.receiver.arrived("tools/call blocked_rate", UPSTREAM_SPAN)

    served, sent = spans["tools/call blocked_rate"], spans[UPSTREAM_SPAN]
    assert served.attributes["crank.outcome"] == code
    assert served.attributes["error.type"] == "tool_error"  # the MCP conventions' value
    assert served.status_code == StatusProto.STATUS_CODE_ERROR
    assert sent.parent_span_id == served.span_id
    assert sent.attributes["error.type"] == code
    assert "http.response.status_code" not in sent.attributes  # no answer came
    assert sent.status_code == StatusProto.STATUS_CODE_ERROR
