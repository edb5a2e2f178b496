"""Prometheus metrics, served on their own port (``CRANK_METRICS_PORT``), never
beside the public endpoint."""

from __future__ import annotations

from collections.abc import Callable

from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

REGISTRY = CollectorRegistry()

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
OPEN_STREAMS = Gauge("crank_mcp_open_streams", "Open SSE streams.", registry=REGISTRY)


async def start_metrics_server(host: str, port: int, age: Callable[[], float]) -> web.AppRunner:
    async def metrics(_: web.Request) -> web.Response:
        SNAPSHOT_AGE.set(age())
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    return runner
