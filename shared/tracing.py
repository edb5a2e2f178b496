"""OpenTelemetry tracing: off unless ``CRANK_OTEL_ENABLED`` (docs/tracing.md).

The spans (docs/architecture.md, "Tracing")::

    MCP request   SERVER    "tools/call {tool}" | "{method}"   RequestTrace (the MCP endpoint)
    └── upstream  CLIENT    "{METHOD} {path template}"         upstream_span (CompiledOperation.call)
    approval run  INTERNAL  "approval {tool}"                  approval_span (the approvals worker)
    └── upstream  CLIENT

Off, the hot path checks ``enabled`` (or a ``None`` trace) and builds nothing.
The OpenTelemetry packages are imported only once tracing is switched on, so the
base install, which has none of them, runs unchanged. The standard ``OTEL_*``
variables configure the SDK as they always do (exporter endpoint and headers,
sampler, resource, batch sizes, propagators): Crank reads only
``OTEL_TRACES_EXPORTER`` and the OTLP protocol itself, to pick the exporter.
"""

from __future__ import annotations

import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from contextvars import Token

    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SpanExporter
    from opentelemetry.trace import Span, Tracer

    from shared.engine.outbound import UpstreamRequest
    from shared.principals import PrincipalRecord

__all__ = [
    "RequestTrace",
    "TracingUnavailable",
    "approval_span",
    "configure",
    "enabled",
    "shutdown",
    "upstream_span",
    "use",
]

enabled = False  # read on the hot path: the whole cost of tracing when it is off
_tracer: Tracer | None = None
_provider: TracerProvider | None = None

# Span names take the method only when it is one of these: a client names any method
# it likes, and a span name must stay low-cardinality (the attribute keeps the rest).
_METHODS = frozenset(
    {
        "initialize",
        "ping",
        "tools/list",
        "tools/call",
        "prompts/list",
        "prompts/get",
        "resources/list",
        "resources/read",
        "resources/templates/list",
        "server/discover",
        "subscriptions/listen",
        "notifications/initialized",
        "notifications/cancelled",
        "tasks/get",
        "tasks/update",
        "tasks/cancel",
    }
)
_MAX_ATTRIBUTE = 128  # characters kept of a client-chosen value (a method name)


class TracingUnavailable(RuntimeError):
    """Tracing is switched on but cannot run (the SDK is missing, an exporter unknown)."""


def configure(*, on: bool, service_name: str) -> bool:
    """Switch tracing on when ``on`` (``CRANK_OTEL_ENABLED``) and ``OTEL_SDK_DISABLED``
    is not true; once per process, after any fork (the batch exporter has a thread)."""
    if not on or os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
    except ImportError as exc:
        raise TracingUnavailable(
            "CRANK_OTEL_ENABLED is set but the OpenTelemetry SDK is not installed: "
            "install Crank with its 'otel' extra (pip install 'crank[otel]')"
        ) from exc
    resource = Resource.create()  # OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": service_name}))
    provider = TracerProvider(resource=resource)  # the sampler: OTEL_TRACES_SAMPLER
    for exporter in _exporters():
        provider.add_span_processor(BatchSpanProcessor(exporter))  # OTEL_BSP_*
    use(provider)
    return True


def _exporters() -> list[SpanExporter]:
    """The exporters ``OTEL_TRACES_EXPORTER`` names (default ``otlp``, over HTTP)."""
    exporters: list[SpanExporter] = []
    for name in os.environ.get("OTEL_TRACES_EXPORTER", "otlp").split(","):
        name = name.strip().lower()
        if name == "otlp":
            protocol = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or os.environ.get(
                "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
            )
            if protocol.strip() != "http/protobuf":
                raise TracingUnavailable(
                    f"OTLP protocol {protocol!r} is not available: Crank exports OTLP "
                    "over HTTP (OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf)"
                )
            try:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter,
                )
            except ImportError as exc:
                raise TracingUnavailable(
                    "the OTLP exporter is not installed: install Crank with its 'otel' extra"
                ) from exc
            exporters.append(OTLPSpanExporter())  # OTEL_EXPORTER_OTLP_* endpoint, headers
        elif name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name not in ("none", ""):
            raise TracingUnavailable(
                f"OTEL_TRACES_EXPORTER {name!r} is not one Crank knows: otlp, console or none"
            )
    return exporters


def use(provider: TracerProvider | None) -> None:
    """Trace with ``provider`` (tests pass one with an in-memory exporter); None: off."""
    global enabled, _tracer, _provider
    _provider = provider
    _tracer = None if provider is None else provider.get_tracer("crank")
    enabled = provider is not None


def shutdown() -> None:
    """Export what is buffered and switch tracing off (the process is ending)."""
    provider = _provider
    use(None)
    if provider is not None:
        provider.shutdown()


def _extract(carrier: Mapping[str, Any]) -> Context | None:
    """The remote context in ``carrier`` (headers, or ``params._meta``), if it holds one."""
    from opentelemetry import propagate, trace

    fields = propagate.get_global_textmap().fields  # OTEL_PROPAGATORS; W3C by default
    found = {name: value for name in fields if isinstance(value := carrier.get(name), str)}
    if not found:
        return None
    context = propagate.extract(found)
    return context if trace.get_current_span(context).get_span_context().is_valid else None


class RequestTrace:
    """The server span of one request to the MCP endpoint; made only while tracing is on.

    The span starts when the body has been read (``message``): a ``traceparent`` in
    ``params._meta`` is then its parent, and the HTTP ``traceparent`` header, when it
    names another context, a link (the OpenTelemetry MCP conventions); without one in
    ``_meta`` the header is the parent. A request refused before its body was read
    gets its span at the end, dated from its arrival."""

    __slots__ = ("_attributes", "_error", "_header", "_span", "_started", "_token")

    def __init__(self, header: Callable[[str], str | None]) -> None:
        """``header``: a request header's value by lower-case name."""
        self._started = time.time_ns()
        self._header = _extract({name: header(name) for name in ("traceparent", "tracestate")})
        self._span: Span | None = None
        self._token: Token[Context] | None = None
        self._error: tuple[str, str | None] | None = None  # error.type, status description
        self._attributes: dict[str, Any] = {
            "network.protocol.name": "http",
            "network.transport": "tcp",
        }

    def watch(
        self, send: Callable[[MutableMapping[str, Any]], Awaitable[None]]
    ) -> Callable[[MutableMapping[str, Any]], Awaitable[None]]:
        """``send``, noting the HTTP status of the answer."""

        async def watched(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.start":
                self._attributes["http.response.status_code"] = message["status"]
            await send(message)

        return watched

    def message(
        self, method: str | None, rpc_id: str | int | None, meta: Any, version: str | None
    ) -> None:
        """Start the span for the JSON-RPC message just read, as the current span."""
        from opentelemetry import context, trace

        name = method if method in _METHODS else ("response" if method is None else "other")
        attributes = self._attributes
        if method is not None:
            attributes["mcp.method.name"] = method[:_MAX_ATTRIBUTE]
        if rpc_id is not None:
            attributes["jsonrpc.request.id"] = str(rpc_id)[:_MAX_ATTRIBUTE]
        if version:
            attributes["mcp.protocol.version"] = version[:_MAX_ATTRIBUTE]
        parent = _extract(meta) if isinstance(meta, dict) else None
        links = []
        if parent is None:
            parent = self._header
        elif self._header is not None:
            ambient = trace.get_current_span(self._header).get_span_context()
            if ambient != trace.get_current_span(parent).get_span_context():
                links.append(trace.Link(ambient))
        self._token = context.attach(trace.set_span_in_context(self._start(name, parent, links)))

    def batch(self, size: int) -> None:
        """Start the span of a 2025-03-26 batch (one span for all its messages)."""
        from opentelemetry import context, trace

        self._attributes["crank.batch_size"] = size
        self._token = context.attach(
            trace.set_span_in_context(self._start("batch", self._header, []))
        )

    def requester(self, key_id: int | None, person: PrincipalRecord | None) -> None:
        """Who called, once authenticated: the key's id, or the person's issuer and
        subject and the client (never the token)."""
        self._attributes.update(requester_attributes(key_id, person))

    def tool_call(
        self, tool: str, version: int, outcome: str, approval_id: str | None, is_error: bool
    ) -> None:
        """A tools/call of a known tool ended with ``outcome`` (Crank's error code, or
        ok, approval_required, ...); a tool result with ``isError`` is a ``tool_error``."""
        attributes = self._attributes
        attributes["gen_ai.tool.name"] = tool
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["crank.tool_version"] = version
        attributes["crank.outcome"] = outcome
        if approval_id is not None:
            attributes["crank.approval_id"] = approval_id
        if is_error:
            self._error = ("tool_error", outcome)
        if self._span is not None:
            self._span.update_name(f"tools/call {tool}")

    def rpc_error(self, code: int | None, message: str | None = None) -> None:
        """The request was answered with the JSON-RPC error ``code``; None: an HTTP
        refusal alone (its status is on the span; a 5xx marks it failed)."""
        if code is not None:
            self._attributes["rpc.response.status_code"] = str(code)
            self._error = (str(code), message)

    def crashed(self, exc: BaseException) -> None:
        """A bug answered 500: its class only (its text may hold request data; the log
        has the traceback under the request id)."""
        self._error = (type(exc).__qualname__, None)

    def finish(
        self, http_method: str, workspace: str | None, agent: str | None, request_id: str | None
    ) -> None:
        """End the span (starting it first if the body was never read); ``workspace``,
        ``agent`` and ``request_id`` once the key was accepted."""
        from opentelemetry import context, trace

        span = self._span or self._start(http_method, self._header, [])
        attributes = self._attributes
        if agent is not None:
            attributes["crank.workspace"] = workspace
            attributes["crank.agent"] = f"{workspace}/{agent}"
        if request_id is not None:
            attributes["crank.request_id"] = request_id
        status = attributes.get("http.response.status_code")
        if self._error is None and isinstance(status, int) and status >= 500:
            self._error = (str(status), None)
        if self._error is not None:
            attributes["error.type"] = self._error[0]
            span.set_status(trace.Status(trace.StatusCode.ERROR, self._error[1]))
        span.set_attributes(attributes)
        span.end()
        if self._token is not None:
            context.detach(self._token)

    def _start(self, name: str, parent: Context | None, links: list[Any]) -> Span:
        from opentelemetry import trace

        assert _tracer is not None
        self._span = span = _tracer.start_span(
            name,
            context=parent,
            kind=trace.SpanKind.SERVER,
            links=links,
            start_time=self._started,
        )
        return span


def requester_attributes(key_id: int | None, person: PrincipalRecord | None) -> dict[str, Any]:
    """The span attributes naming who called (docs/tracing.md): ``crank.key_id``, or
    ``crank.principal.issuer``, ``crank.principal.subject`` and ``crank.client_id``."""
    attributes: dict[str, Any] = {}
    if key_id is not None:
        attributes["crank.key_id"] = key_id
    if person is not None:
        attributes["crank.principal.issuer"] = person.issuer[:_MAX_ATTRIBUTE]
        attributes["crank.principal.subject"] = person.subject[:_MAX_ATTRIBUTE]
        if person.client_id is not None:
            attributes["crank.client_id"] = person.client_id[:_MAX_ATTRIBUTE]
    return attributes


@contextmanager
def upstream_span(request: UpstreamRequest, path_template: str) -> Iterator[UpstreamSpan]:
    """The client span of one upstream step (retries included), the current span
    meanwhile; ``UpstreamSpan.request`` carries its ``traceparent``."""
    from opentelemetry import propagate, trace

    assert _tracer is not None
    parts = urlsplit(request.url)
    method = request.method.upper()
    attributes: dict[str, Any] = {
        "http.request.method": method,
        "url.scheme": parts.scheme,
        "url.template": path_template,
        "server.address": parts.hostname or "",
    }
    if parts.port is not None:
        attributes["server.port"] = parts.port
    with _tracer.start_as_current_span(
        f"{method} {path_template}",
        kind=trace.SpanKind.CLIENT,
        attributes=attributes,
        record_exception=False,  # error.type says what failed; texts may hold upstream data
        set_status_on_exception=False,
    ) as span:
        carrier: dict[str, str] = {}
        propagate.inject(carrier)
        yield UpstreamSpan(span, _with_headers(request, carrier))


class UpstreamSpan:
    """The span of ``upstream_span`` and the request to send inside it."""

    __slots__ = ("request", "span")

    def __init__(self, span: Span, request: UpstreamRequest) -> None:
        self.span = span
        self.request = request

    def ended(self, status: int | None, attempts: int, error_code: str | None) -> None:
        """The step ended: the upstream's ``status`` (None: no answer), after ``attempts``;
        ``error_code``, Crank's, when it failed (an upstream status, a transport fault,
        an unusable answer)."""
        from opentelemetry import trace

        span = self.span
        if status is not None:
            span.set_attribute("http.response.status_code", status)
        if attempts > 1:
            span.set_attribute("http.request.resend_count", attempts - 1)
        if error_code is not None:
            span.set_attribute("error.type", error_code)
            span.set_status(trace.Status(trace.StatusCode.ERROR))


def _with_headers(request: UpstreamRequest, carrier: Mapping[str, str]) -> UpstreamRequest:
    """``request`` with the propagation headers, replacing any of the same name."""
    from dataclasses import replace

    names = {name.lower() for name in carrier}
    kept = tuple((k, v) for k, v in request.headers if k.lower() not in names)
    return replace(request, headers=kept + tuple(carrier.items()))


@contextmanager
def approval_span(
    *,
    approval_id: str,
    attempt: int,
    tool: str,
    workspace: str,
    agent: str,
    request_id: str,
    key_id: int | None = None,
    person: PrincipalRecord | None = None,
) -> Iterator[Span]:
    """The span of one approved call's run in the approvals worker, a root: the call
    that asked for the approval ended long ago; ``crank.approval_id`` joins the two.
    ``key_id`` or ``person``: who asked for it, from the approval row."""
    from opentelemetry import trace

    assert _tracer is not None
    with _tracer.start_as_current_span(
        f"approval {tool}",
        context=trace.set_span_in_context(trace.INVALID_SPAN),  # a new trace
        kind=trace.SpanKind.INTERNAL,
        attributes={
            "crank.approval_id": approval_id,
            "crank.attempt": attempt,
            "gen_ai.tool.name": tool,
            "gen_ai.operation.name": "execute_tool",
            "crank.workspace": workspace,
            "crank.agent": f"{workspace}/{agent}",
            "crank.request_id": request_id,
            **requester_attributes(key_id, person),
        },
    ) as span:
        yield span
