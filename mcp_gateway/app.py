"""The gateway's ASGI app: ``granian --interface asgi --factory mcp_gateway.app:create_app``.

One ASGI callable fronts the process: the MCP endpoint
(``/mcp/v1/{workspace}/{agent}`` and ``/v1/...``) goes straight to the lean
handler, the approval-key endpoints (``.../{agent}/approvals...``) to
mcp_gateway.approvals.endpoints, the approver inbox (``.../approvals/inbox``, a
static page that needs no database) to mcp_gateway.inbox.page; ``/healthz`` and ``/readyz`` are answered
here. Metrics have their own port (``CRANK_METRICS_PORT``). Behind the
proxies of ``CRANK_TRUSTED_PROXIES`` the client address of every request is
the one they forwarded in ``X-Forwarded-For`` (granian's proxy-header wrapper).

``/readyz`` answers 200 ``ready`` while the snapshot is current, 503
``starting`` before the first snapshot, and 503 ``degraded`` while the
database is unreachable or the snapshot is older than three refresh
intervals; a degraded gateway keeps serving its last snapshot
(mcp_gateway.catalog.refresher).

Shutdown (docs/architecture.md, "Shutdown"): granian waits for open answers
before it runs the lifespan shutdown, and SSE streams never end by themselves,
so the first SIGTERM or SIGINT ends every stream at once
(``StreamHub.shut_down``), ends every tools/call waiting for its approval with
the seed's ``approval_required`` answer (``ApprovalWaiters.shut_down``) and
stops the approval worker from claiming; granian's own handling of the signal
runs as before. The lifespan shutdown then gives running approved calls
``CRANK_APPROVAL_SHUTDOWN_GRACE_S`` to finish and hands the rest back
(mcp_gateway.approvals.worker).
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import signal
import threading
import time
from collections.abc import Awaitable, Callable
from types import FrameType
from typing import Any

import structlog
from aiohttp import web
from granian.utils.proxies import wrap_asgi_with_proxy_headers

from mcp_gateway.approvals import endpoints as approval_endpoints
from mcp_gateway.approvals.expiry import ExpirySweeper
from mcp_gateway.approvals.leases import CHANNEL as APPROVALS_CHANNEL
from mcp_gateway.approvals.waiters import CHANNEL as FINISHED_CHANNEL
from mcp_gateway.approvals.waiters import ApprovalWaiters
from mcp_gateway.approvals.worker import ApprovalWorker
from mcp_gateway.catalog.keys import KeyResolver
from mcp_gateway.catalog.lookup_limits import LookupLimits
from mcp_gateway.catalog.refresher import Refresher, resilient_conninfo
from mcp_gateway.catalog.snapshot import Snapshot, SnapshotOptions
from mcp_gateway.inbox import page as inbox_page
from mcp_gateway.pipeline import elicitation_stream
from mcp_gateway.pipeline.confirmation_tokens import REQUEST_STATES, ConfirmationSigner
from mcp_gateway.state import GatewayState
from mcp_gateway.transport import endpoint
from mcp_gateway.transport.asgi import Receive, Scope, Send, respond
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.jsonrpc import encode
from mcp_gateway.transport.rate_limits import RateLimiter
from mcp_gateway.transport.sessions import SessionSigner
from mcp_gateway.transport.streams import StreamHub
from mcp_gateway.upkeep.backlog import BacklogGauges
from mcp_gateway.upkeep.call_log import CallLogWriter
from mcp_gateway.upkeep.metrics import (
    DATABASE_REACHABLE,
    SNAPSHOT_AGE,
    SNAPSHOT_VERSION,
    start_metrics_server,
)
from mcp_gateway.upkeep.replicas import Replicas
from mcp_gateway.upkeep.retention import Pruner
from mcp_gateway.webhooks.deliverer import DeliveryOptions, WebhookDeliverer
from mcp_gateway.webhooks.outbox import CHANNEL as WEBHOOKS_CHANNEL
from shared import tracing
from shared.crypto import KeyHasher, SecretBox
from shared.db import open_pool
from shared.engine.outbound import ExecutorConfig, UpstreamExecutor
from shared.engine.spec import RateLimit
from shared.engine.ssrf import AddressPolicy
from shared.last_use import LastUseRecorder
from shared.logging import configure_logging
from shared.settings import Settings, SettingsError, load_settings, parse_rate_limit

log = structlog.get_logger(__name__)

MCP_PATH = re.compile(r"^(?:/mcp)?/v1/([^/]+)/([^/]+)/?$")


class GatewayApp:
    def __init__(self, settings: Settings) -> None:
        if not settings.database_url:
            raise SettingsError("CRANK_DATABASE_URL is not set (crank up sets it for you)")
        self.settings = settings
        self.secret_key = settings.require_secret_key()
        self.state: GatewayState | None = None
        self._metrics: web.AppRunner | None = None
        self._pruner: Pruner | None = None
        self._expiry: ExpirySweeper | None = None
        self._webhooks: WebhookDeliverer | None = None
        self._chained_signals: dict[int, Any] = {}  # signal -> the handler we chained to
        # Behind the proxies it names, the client address is the one they forwarded
        # (docs/architecture.md, "Keys": the per-address look-up limit counts by it).
        self._http = (
            wrap_asgi_with_proxy_headers(self._serve_http, list(settings.trusted_proxies))
            if settings.trusted_proxies
            else self._serve_http
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        await self._http(scope, receive, send)

    async def _serve_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path: str = scope["path"]
        match = MCP_PATH.fullmatch(path)
        state = self.state
        if inbox := inbox_page.PATH.fullmatch(path):  # before approvals: "inbox" is no id
            await inbox_page.handle(scope, send, inbox)
        elif state is None:
            await respond(send, 503, encode({"status": "starting"}))
        elif match:
            await endpoint.handle(state, scope, receive, send, match[1], match[2])
        elif approvals := approval_endpoints.PATH.fullmatch(path):
            await approval_endpoints.handle(state, scope, receive, send, approvals)
        elif path == "/healthz":
            await respond(send, 200, encode({"status": "ok"}))
        elif path == "/readyz":
            await self._readyz(state, send)
        else:
            await respond(send, 404, ProtocolError(404, "no such path").problem_body())

    async def _readyz(self, state: GatewayState, send: Send) -> None:
        refresher = state.refresher
        body: dict[str, Any] = {
            "status": "ready" if refresher.ready else "degraded",
            "snapshot_version": refresher.snapshot.version,
            "snapshot_age_s": round(time.monotonic() - refresher.last_success, 3)
            if refresher.loaded
            else None,
            "database_reachable": refresher.database_reachable,
            "listening": refresher.listening,
            "replicas": state.replicas.count,  # live gateway processes sharing rate limits
        }
        if not refresher.loaded:
            body["status"] = "starting"
        # Degraded still serves the last snapshot; 503 tells load balancers and humans.
        await respond(send, 200 if refresher.ready else 503, encode(body))

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                try:
                    await self._start()
                except Exception as exc:
                    log.exception("gateway_start_failed")
                    await send({"type": "lifespan.startup.failed", "message": str(exc)})
                    return
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await self._stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _start(self) -> None:
        settings = self.settings
        configure_logging(settings.log_level)
        # Per worker process, after granian forked it (docs/tracing.md).
        tracing.configure(on=settings.otel_enabled, service_name="crank-gateway")
        assert settings.database_url is not None
        conninfo = resilient_conninfo(settings.database_url)
        # Autocommit: the gateway mostly reads; multi-statement work opens its own transaction.
        # Checked connections and a short reconnect backoff: after an outage the pool
        # recovers within seconds, not minutes.
        pool = await open_pool(
            conninfo,
            max_size=settings.db_pool_size,
            name="gateway",
            autocommit=True,
            check=True,
            reconnect_timeout_s=10.0,
        )
        streams = StreamHub()
        waiters = ApprovalWaiters(pool)
        elicitation_waiters = elicitation_stream.answer_waiters(pool)
        self._end_streams_on_signal(streams, waiters, elicitation_waiters)
        hasher = KeyHasher(self.secret_key, settings.secret_key_previous)

        def swapped(old: Snapshot, new: Snapshot) -> None:
            keys.snapshot_swapped(new)
            streams.snapshot_swapped(old, new)
            SNAPSHOT_VERSION.set(new.version)

        refresher = Refresher(
            conninfo,
            refresh_s=settings.mcp_refresh_ms / 1000,
            listen=settings.mcp_listen,
            on_swap=swapped,
            snapshot_conninfo=resilient_conninfo(settings.snapshot_database_url)
            if settings.snapshot_database_url
            else None,
            notify={
                APPROVALS_CHANNEL: self._wake_approvals,
                WEBHOOKS_CHANNEL: self._wake_webhooks,
                FINISHED_CHANNEL: waiters.finished,
                elicitation_stream.CHANNEL: elicitation_waiters.finished,
            },
            options=SnapshotOptions(
                page_size=settings.mcp_tools_page_size,
                language=settings.language,
                box=SecretBox(self.secret_key, settings.secret_key_previous),
            ),
        )
        keys = KeyResolver(
            hasher,
            pool,
            database_reachable=lambda: refresher.database_reachable,
            limits=LookupLimits(
                parse_rate_limit(settings.key_lookup_limit),
                parse_rate_limit(settings.key_lookup_limit_per_address),
            ),
        )
        await refresher.start()
        replicas = Replicas(pool)
        default_limit = settings.default_rate_limit()
        self.state = GatewayState(
            settings=settings,
            pool=pool,
            refresher=refresher,
            keys=keys,
            sessions=SessionSigner(self.secret_key, settings.mcp_session_ttl_s),
            confirmations=ConfirmationSigner(self.secret_key, settings.confirmation_ttl_s),
            request_states=ConfirmationSigner(
                self.secret_key, settings.elicitation_ttl_s, REQUEST_STATES
            ),
            streams=streams,
            waiters=waiters,
            elicitation_waiters=elicitation_waiters,
            key_use=LastUseRecorder("api_keys"),
            call_log=CallLogWriter(pool, interval_s=settings.call_log_flush_ms / 1000),
            executor=UpstreamExecutor(
                AddressPolicy.from_settings(
                    allow_private_upstreams=settings.allow_private_upstreams,
                    upstream_allowlist=settings.upstream_allowlist,
                ),
                ExecutorConfig.from_settings(settings),
            ),
            replicas=replicas,
            limiter=RateLimiter(replicas.share),
            default_rate_limit=RateLimit(requests=default_limit[0], per_seconds=default_limit[1])
            if default_limit
            else None,
        )
        await self.state.executor.start()
        self.state.approvals = ApprovalWorker(
            pool,
            self.state.executor,
            owner=replicas.replica_id,
            snapshot=lambda: refresher.snapshot,
            box=SecretBox(self.secret_key, settings.secret_key_previous),
            call_log=self.state.call_log,
            language=settings.language,
            concurrency=settings.approval_workers,
        )
        self.state.approvals.start()
        self._webhooks = WebhookDeliverer(
            pool,
            self.state.executor,
            owner=replicas.replica_id,
            snapshot=lambda: refresher.snapshot,
            box=SecretBox(self.secret_key, settings.secret_key_previous),
            options=DeliveryOptions(
                public_url=settings.public_url,
                path_prefix=settings.public_path_prefix,
                retry_base_s=settings.webhook_retry_base_ms / 1000,
                max_age_s=settings.webhook_max_age_s,
            ),
        )
        self._webhooks.start()
        waiters.start()
        elicitation_waiters.start()
        replicas.start()
        self._pruner = Pruner(pool, settings)
        self._pruner.start()
        self._expiry = ExpirySweeper(pool)
        self._expiry.start()
        self.state.key_use.start(pool)
        self.state.call_log.start()
        backlog = BacklogGauges(pool)

        async def before_scrape() -> None:
            SNAPSHOT_AGE.set(time.monotonic() - refresher.last_success)
            DATABASE_REACHABLE.set(refresher.database_reachable)
            await backlog.refresh()

        self._metrics = await self._serve_metrics(settings, before_scrape)
        log.info("gateway_started", snapshot_version=refresher.snapshot.version)

    @staticmethod
    async def _serve_metrics(
        settings: Settings, before_scrape: Callable[[], Awaitable[None]]
    ) -> web.AppRunner | None:
        """Worker i of N serves metrics on ``CRANK_METRICS_PORT + i``: each takes the first
        free port of that range (docs/architecture.md, "Gateway workers")."""
        ports = range(
            settings.metrics_port, settings.metrics_port + max(1, settings.gateway_workers)
        )
        error: OSError | None = None
        for port in ports:
            try:
                return await start_metrics_server(settings.host, port, before_scrape)
            except OSError as exc:  # taken by another worker
                error = exc
        log.warning(
            "metrics_port_unavailable",
            ports=f"{ports.start}-{ports.stop - 1}",
            error=str(error),
        )
        return None

    def _end_streams_on_signal(self, streams: StreamHub, *waiters: ApprovalWaiters) -> None:
        """Chain a handler for SIGTERM and SIGINT in front of the server's own.

        asyncio dispatches its signal handlers through the wake-up fd, not the
        Python-level handler this replaces, so the server's handling stays intact.
        Where the server installed none (the default action kills the process
        anyway) or we are not in the main thread, nothing is installed.
        """
        if threading.current_thread() is not threading.main_thread():
            return
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            previous = signal.getsignal(signum)
            if not callable(previous):
                continue

            def handler(number: int, frame: FrameType | None, previous: Any = previous) -> None:
                if not loop.is_closed():
                    loop.call_soon_threadsafe(streams.shut_down)
                    for registry in waiters:
                        loop.call_soon_threadsafe(registry.shut_down)
                    loop.call_soon_threadsafe(self._stop_claiming)
                previous(number, frame)

            signal.signal(signum, handler)
            self._chained_signals[signum] = previous

    def _wake_approvals(self, _payload: str | None = None) -> None:
        if self.state is not None and self.state.approvals is not None:
            self.state.approvals.wake()

    def _wake_webhooks(self, _payload: str | None = None) -> None:
        if self._webhooks is not None:
            self._webhooks.wake()

    def _stop_claiming(self) -> None:
        """On SIGTERM at once: granian may take a while to reach the lifespan shutdown."""
        if self.state is not None and self.state.approvals is not None:
            self.state.approvals.stop_claiming()

    def _unchain_signals(self) -> None:
        while self._chained_signals:
            signum, previous = self._chained_signals.popitem()
            signal.signal(signum, previous)

    async def _stop(self) -> None:
        log.info("gateway_stopping")
        if self._metrics is not None:
            with contextlib.suppress(Exception):
                await self._metrics.cleanup()
        self._unchain_signals()
        if self._pruner is not None:
            await self._pruner.stop()
        if self._expiry is not None:
            await self._expiry.stop()
        if self.state is not None:
            if self.state.approvals is not None:  # finish or release claimed approvals
                await self.state.approvals.stop(self.settings.approval_shutdown_grace_s)
            if self._webhooks is not None:  # before the executor closes
                await self._webhooks.stop()
            self.state.streams.shut_down()
            await self.state.waiters.stop()
            await self.state.elicitation_waiters.stop()
            await self.state.replicas.stop()
            await self.state.key_use.stop(self.state.pool)
            await self.state.call_log.stop()
            await self.state.executor.close()
            await self.state.refresher.stop()
            await self.state.pool.close()
        tracing.shutdown()  # export the spans still buffered
        log.info("gateway_stopped")


def create_app(settings: Settings | None = None) -> GatewayApp:
    return GatewayApp(settings or load_settings())
