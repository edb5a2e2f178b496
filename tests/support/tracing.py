"""Tracing in tests: spans kept in memory, a W3C parent to send, and an OTLP/HTTP
receiver on loopback that decodes what a gateway process exports."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    TraceFlags,
    format_span_id,
    format_trace_id,
)

from shared import tracing
from tests.support.gateway import serve_upstream
from tests.support.processes import free_port


@contextmanager
def recording() -> Iterator[InMemorySpanExporter]:
    """Tracing on for the block, every span ended kept in memory."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.use(provider)
    try:
        yield exporter
    finally:
        tracing.use(None)
        provider.shutdown()


def only(spans: tuple[ReadableSpan, ...], name: str) -> ReadableSpan:
    found = [span for span in spans if span.name == name]
    assert len(found) == 1, [span.name for span in spans]
    return found[0]


@dataclass(frozen=True)
class Parent:
    """A caller's span, sent as ``traceparent``."""

    trace_id: int = field(default_factory=lambda: secrets.randbits(128) or 1)
    span_id: int = field(default_factory=lambda: secrets.randbits(64) or 1)

    @property
    def traceparent(self) -> str:
        return f"00-{format_trace_id(self.trace_id)}-{format_span_id(self.span_id)}-01"

    def span(self) -> NonRecordingSpan:
        return NonRecordingSpan(
            SpanContext(self.trace_id, self.span_id, is_remote=False, trace_flags=TraceFlags(1))
        )


def traceparent_ids(value: str) -> tuple[int, int]:
    """(trace id, parent span id) of a ``traceparent`` header value."""
    _version, trace_id, span_id, _flags = value.split("-")
    return int(trace_id, 16), int(span_id, 16)


@dataclass
class ExportedSpan:
    """One span as an OTLP/HTTP export carried it."""

    name: str
    kind: int
    trace_id: int
    span_id: int
    parent_span_id: int | None
    attributes: dict[str, Any]
    service_name: str
    links: list[tuple[int, int]]
    status_code: int  # opentelemetry.proto.trace.v1.trace_pb2.Status.StatusCode


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


@dataclass
class Receiver:
    """What the OTLP receiver was sent."""

    port: int = field(default_factory=free_port)
    spans: list[ExportedSpan] = field(default_factory=list)
    exported: asyncio.Event = field(default_factory=asyncio.Event)  # set on each export

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def traces(self, request: web.Request) -> web.Response:
        assert request.content_type == "application/x-protobuf"
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.read())
        for resource_spans in export.resource_spans:
            resource = {a.key: _value(a.value) for a in resource_spans.resource.attributes}
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    self.spans.append(
                        ExportedSpan(
                            name=span.name,
                            kind=span.kind,
                            trace_id=int.from_bytes(span.trace_id, "big"),
                            span_id=int.from_bytes(span.span_id, "big"),
                            parent_span_id=int.from_bytes(span.parent_span_id, "big") or None,
                            attributes={a.key: _value(a.value) for a in span.attributes},
                            service_name=str(resource.get("service.name")),
                            status_code=span.status.code,
                            links=[
                                (
                                    int.from_bytes(link.trace_id, "big"),
                                    int.from_bytes(link.span_id, "big"),
                                )
                                for link in span.links
                            ],
                        )
                    )
        self.exported.set()
        body = ExportTraceServiceResponse().SerializeToString()
        return web.Response(body=body, content_type="application/x-protobuf")

    def named(self, name: str) -> list[ExportedSpan]:
        return [span for span in self.spans if span.name == name]

    async def arrived(self, *names: str, timeout_s: float = 30) -> dict[str, ExportedSpan]:
        """The one span of each name, once all have arrived."""
        async with asyncio.timeout(timeout_s):
            while not all(self.named(name) for name in names):
                self.exported.clear()
                await self.exported.wait()
        found = {}
        for name in names:
            (found[name],) = self.named(name)
        return found


@asynccontextmanager
async def otlp_receiver() -> AsyncIterator[Receiver]:
    """An OTLP/HTTP trace receiver on a free loopback port (POST /v1/traces, protobuf)."""
    receiver = Receiver()
    app = web.Application()
    app.router.add_post("/v1/traces", receiver.traces)
    async with serve_upstream(app, receiver.port):
        yield receiver
