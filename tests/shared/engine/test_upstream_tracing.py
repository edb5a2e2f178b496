"""The upstream step's client span (shared.tracing.upstream_span): its shape, the
``traceparent`` the upstream receives, and nothing sent when tracing is off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web
from opentelemetry import context, trace
from opentelemetry.trace import SpanKind, StatusCode

from shared.engine.compiler import CompiledOperation, compile_operation
from shared.engine.errors import ToolError
from shared.engine.outbound import UpstreamExecutor
from shared.engine.spec import operation_from_builtins
from shared.engine.upstream import UpstreamCall
from tests.support.gateway import serve_upstream
from tests.support.tracing import Parent, only, recording, traceparent_ids

TOKEN = "secret-token-value"


class Seen:
    def __init__(self) -> None:
        self.headers: list[dict[str, str]] = []

    async def item(self, request: web.Request) -> web.Response:
        self.headers.append(dict(request.headers))
        if request.match_info["id"] == "gone":
            return web.json_response({"message": "no such item"}, status=404)
        return web.json_response({"id": request.match_info["id"]})


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[int, Seen]]:
    seen = Seen()
    app = web.Application()
    app.router.add_get("/items/{id}", seen.item)
    async with serve_upstream(app) as port:
        yield port, seen


def operation(port: int) -> CompiledOperation:
    spec: dict[str, Any] = {
        "name": "get_item",
        "description": "Gets an item. Use when testing tracing of the upstream step.",
        "input": {
            "type": "object",
            "properties": {"id": {"type": "string"}, "q": {"type": "string"}},
            "required": ["id"],
        },
        "request": {
            "method": "GET",
            "url": f"http://127.0.0.1:{port}/items/{{id}}",
            "query": {"q": "q"},
            "auth": {"type": "bearer", "secret": "T"},
        },
        "execution_config": {"timeout_ms": 2000, "retries": 0},
    }
    return compile_operation(operation_from_builtins(spec))


async def call(
    compiled: CompiledOperation, executor: UpstreamExecutor, arguments: dict[str, Any]
) -> UpstreamCall:
    upstream = UpstreamCall()
    built = compiled.build(compiled.validate(arguments), {"T": TOKEN})
    await compiled.call(executor, built, upstream, egress=None)
    return upstream


async def test_the_upstream_call_is_a_client_span_whose_context_the_upstream_receives(
    upstream: tuple[int, Seen], executor: UpstreamExecutor
) -> None:
    port, seen = upstream
    parent = Parent()
    with recording() as spans:
        token = context.attach(trace.set_span_in_context(parent.span()))
        try:
            await call(operation(port), executor, {"id": "item-77", "q": "private words"})
        finally:
            context.detach(token)
    span = only(spans.get_finished_spans(), "GET /items/{id}")
    assert span.kind is SpanKind.CLIENT
    assert span.parent is not None
    assert span.parent.span_id == parent.span_id
    assert span.context.trace_id == parent.trace_id
    assert traceparent_ids(seen.headers[0]["traceparent"]) == (
        parent.trace_id,
        span.context.span_id,
    )
    assert dict(span.attributes or {}) == {
        "http.request.method": "GET",
        "url.scheme": "http",
        "url.template": "/items/{id}",
        "server.address": "127.0.0.1",
        "server.port": port,
        "http.response.status_code": 200,
    }
    assert span.status.status_code is StatusCode.UNSET


async def test_a_failed_upstream_call_carries_cranks_error_code(
    upstream: tuple[int, Seen], executor: UpstreamExecutor
) -> None:
    port, _seen = upstream
    with recording() as spans, pytest.raises(ToolError) as raised:
        await call(operation(port), executor, {"id": "gone"})
    span = only(spans.get_finished_spans(), "GET /items/{id}")
    assert span.attributes is not None
    assert span.attributes["error.type"] == raised.value.error_code
    assert span.attributes["http.response.status_code"] == 404
    assert span.status.status_code is StatusCode.ERROR
    assert not span.events  # no exception text: it may quote the upstream


async def test_no_argument_value_or_secret_reaches_a_span(
    upstream: tuple[int, Seen], executor: UpstreamExecutor
) -> None:
    port, _seen = upstream
    with recording() as spans:
        await call(operation(port), executor, {"id": "item-77", "q": "private words"})
    (span,) = spans.get_finished_spans()
    values = " ".join(str(value) for value in (span.attributes or {}).values()) + span.name
    for secret in ("item-77", "private", TOKEN):
        assert secret not in values


async def test_with_tracing_off_no_trace_context_is_sent(
    upstream: tuple[int, Seen], executor: UpstreamExecutor
) -> None:
    port, seen = upstream
    await call(operation(port), executor, {"id": "item-1"})
    assert "traceparent" not in {name.lower() for name in seen.headers[0]}
