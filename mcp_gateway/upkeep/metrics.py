"""Prometheus metrics, served on their own port (``CRANK_METRICS_PORT``), never
beside the public endpoint. The registry is the process's one (shared.metrics),
so what shared code counts, such as background loop failures, is served too."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

from aiohttp import web
from prometheus_client import Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from shared.metrics import REGISTRY as REGISTRY

REQUESTS = Counter(
    "crank_mcp_requests_total",
    "MCP requests by JSON-RPC method and HTTP status.",
    ["method", "status"],
    registry=REGISTRY,
)
LATENCY = Histogram(
    "crank_mcp_request_seconds",
    "Time to answer an MCP request, by JSON-RPC method.",
    ["method"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    registry=REGISTRY,
)
SNAPSHOT_VERSION = Gauge(
    "crank_snapshot_version", "Catalog version of the snapshot in memory.", registry=REGISTRY
)
SNAPSHOT_AGE = Gauge(
    "crank_snapshot_age_seconds",
    "Seconds since the snapshot was last confirmed current with the database.",
    registry=REGISTRY,
)
SNAPSHOT_BUILD = Gauge(
    "crank_snapshot_build_seconds",
    "Time the last snapshot build took, by kind: full (the first) or incremental.",
    ["kind"],
    registry=REGISTRY,
)
SNAPSHOT_TOOLS_COMPILED = Counter(
    "crank_snapshot_tools_compiled_total",
    "Tools compiled by snapshot builds (an unchanged operation version is never compiled again).",
    registry=REGISTRY,
)
# ``source``: replica (CRANK_SNAPSHOT_DATABASE_URL) or primary (no replica, or it could
# not be reached; mcp_gateway.catalog.refresher).
SNAPSHOT_LOADS = Counter(
    "crank_snapshot_loads_total",
    "Snapshot loads (catalog changes) by the database they read: primary or replica.",
    ["source"],
    registry=REGISTRY,
)
DATABASE_REACHABLE = Gauge(
    "crank_database_reachable",
    "1 while the last catalog poll reached the primary database, else 0.",
    registry=REGISTRY,
)
# ``reason``: timeout (408) or too_many_unfinished (429; mcp_gateway.transport.body_reads).
BODY_REFUSALS = Counter(
    "crank_mcp_body_refusals_total",
    "Requests refused while their body was still arriving: timeout (not whole within "
    "CRANK_MCP_BODY_TIMEOUT_S) or too_many_unfinished (the key's cap of unfinished bodies).",
    ["reason"],
    registry=REGISTRY,
)
UNFINISHED_BODIES = Gauge(
    "crank_mcp_unfinished_bodies",
    "Request bodies this process is reading now (set when /metrics is scraped).",
    registry=REGISTRY,
)
OPEN_STREAMS = Gauge("crank_mcp_open_streams", "Open SSE streams.", registry=REGISTRY)
APPROVAL_WAITERS = Gauge(
    "crank_approval_waiters",
    "tools/call answers held open for a human's decision on their approval.",
    registry=REGISTRY,
)

# Per tool. Label values stay bounded: agents and tools are admin-defined
# catalog entries, and outcome is "ok" or a code of the closed list in shared.engine.errors.
TOOL_CALLS = Counter(
    "crank_tool_calls_total",
    "tools/call of a known tool, by agent (workspace/agent), tool and outcome.",
    ["agent", "tool", "outcome"],
    registry=REGISTRY,
)
UPSTREAM_LATENCY = Histogram(
    "crank_upstream_request_seconds",
    "Time a tools/call spent on its upstream, retries included.",
    ["agent", "tool"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
    registry=REGISTRY,
)
RATE_LIMITED = Counter(
    "crank_rate_limited_total",
    "Requests refused with 429, by agent and method class (tools_call or other).",
    ["agent", "method_class"],
    registry=REGISTRY,
)
# ``result`` is one of the fixed names of mcp_gateway.catalog.keys (LOOKUP_RESULTS).
KEY_LOOKUPS = Counter(
    "crank_key_lookups_total",
    "Bearer keys the snapshot did not know, by what became of them; "
    "found, not_found and failed made a database query.",
    ["result"],
    registry=REGISTRY,
)
CALL_LOG_DROPPED = Counter(
    "crank_call_log_dropped_total",
    "Call log rows dropped because the buffer was full or the database refused a batch.",
    registry=REGISTRY,
)
# ``outcome``: delivered, retry or failed (mcp_gateway.webhooks.deliverer).
WEBHOOK_ATTEMPTS = Counter(
    "crank_webhook_attempts_total",
    "Webhook delivery attempts by outcome: delivered, retry (tried again later) or failed.",
    ["outcome"],
    registry=REGISTRY,
)

# ``queue``: approvals or webhooks (the two leased work queues).
LEASE_EXPIRIES = Counter(
    "crank_lease_expiries_total",
    "Rows this process claimed because another holder's lease had expired "
    "(the holder died or lost the database mid-call), by queue.",
    ["queue"],
    registry=REGISTRY,
)
# Read from the database when /metrics is scraped (mcp_gateway.upkeep.backlog); NaN
# while the database does not answer. Every replica reports the same totals.
APPROVALS = Gauge(
    "crank_approvals",
    "Active approvals in the database, by status: pending, approved or executing.",
    ["status"],
    registry=REGISTRY,
)
APPROVAL_OLDEST_PENDING = Gauge(
    "crank_approval_oldest_pending_seconds",
    "Age of the oldest approval still waiting for a human's decision (0: none).",
    registry=REGISTRY,
)
WEBHOOK_BACKLOG = Gauge(
    "crank_webhook_backlog",
    "Webhook deliveries not yet delivered or given up, of live subscriptions.",
    registry=REGISTRY,
)
WEBHOOK_OLDEST_UNDELIVERED = Gauge(
    "crank_webhook_oldest_undelivered_seconds",
    "Age of the oldest webhook delivery not yet delivered or given up (0: none).",
    registry=REGISTRY,
)

# Known label values show at zero before anything happened, so a rate() has its start.
for _source in ("primary", "replica"):
    SNAPSHOT_LOADS.labels(_source)
for _queue in ("approvals", "webhooks"):
    LEASE_EXPIRIES.labels(_queue)
for _reason in ("timeout", "too_many_unfinished"):
    BODY_REFUSALS.labels(_reason)


def count_lease_expiries(queue: str, count: int) -> None:
    """``count`` rows of ``queue`` were claimed from an expired lease."""
    if count:
        LEASE_EXPIRIES.labels(queue).inc(count)


def agent_label(workspace: str, agent: str) -> str:
    """The ``agent`` label of the per-tool metrics: ``workspace/agent``."""
    return f"{workspace}/{agent}"


def method_class(rpc_method: str) -> str:
    """The ``method_class`` label of ``crank_rate_limited_total``."""
    return "tools_call" if rpc_method == "tools/call" else "other"


# ``labels()`` costs about a microsecond per call on the hot path; the children
# are cached here (no more of them than the registry itself keeps).
@functools.cache
def _tool_calls(agent: str, tool: str, outcome: str) -> Counter:
    return TOOL_CALLS.labels(agent, tool, outcome)


@functools.cache
def _upstream_latency(agent: str, tool: str) -> Histogram:
    return UPSTREAM_LATENCY.labels(agent, tool)


# Bounded too: ``method`` is one of transport.exchange._LABELLED or "other", statuses are the
# endpoint's own.
@functools.cache
def requests_counter(method: str, status: int) -> Counter:
    """``crank_mcp_requests_total`` for one method label and HTTP status (the child is cached)."""
    return REQUESTS.labels(method, str(status))


@functools.cache
def latency_histogram(method: str) -> Histogram:
    """``crank_mcp_request_seconds`` for one method label (the child is cached)."""
    return LATENCY.labels(method)


def observe_tool_call(agent: str, tool: str, outcome: str, upstream_s: float | None) -> None:
    """Counts one tools/call outcome; ``upstream_s`` is None when no upstream call was made."""
    _tool_calls(agent, tool, outcome).inc()
    if upstream_s is not None:
        _upstream_latency(agent, tool).observe(upstream_s)


async def start_metrics_server(
    host: str, port: int, before_scrape: Callable[[], Awaitable[None]]
) -> web.AppRunner:
    """Serves /metrics on its own port; ``before_scrape()`` sets the gauges read at
    scrape time (the snapshot's age, the database backlog)."""

    async def metrics(_: web.Request) -> web.Response:
        await before_scrape()
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
