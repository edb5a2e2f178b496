"""The gateway's ASGI app (``granian --interface asgi --factory mcp_gateway.app:create_app``):
it builds every service, starts them in one ordered list, and routes each path
(docs/architecture.md, "Layers of the gateway", "Shutdown").

Routes: the MCP endpoint (``/mcp/v1/{workspace}/{agent}`` and ``/v1/...``) to
mcp_gateway.transport.endpoint, the approval-key endpoints to
mcp_gateway.transport.approval_endpoints, the approver inbox (a static page that
needs no database) to mcp_gateway.inbox.page; ``/healthz`` and ``/readyz`` here
(``/readyz``: 200 ``ready``, 503 ``starting`` before the first snapshot, 503
``degraded`` while the database is away or the snapshot is older than three
refresh intervals). Metrics have their own port. Behind ``CRANK_TRUSTED_PROXIES``
the client address is the one they forwarded (granian's proxy-header wrapper).

The first SIGTERM or SIGINT ends every stream and wait at once and stops the
approval worker from claiming (granian waits for open answers before the
lifespan shutdown, and an SSE stream never ends by itself); granian's own
handling of the signal runs as before.
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
from typing import Any, Protocol

import structlog
from aiohttp import web

from mcp_gateway.approvals import store as approvals_store
from mcp_gateway.approvals.expiry import ExpirySweeper
from mcp_gateway.approvals.store import CHANNEL as APPROVALS_CHANNEL
from mcp_gateway.approvals.waiters import CHANNEL as FINISHED_CHANNEL
from mcp_gateway.approvals.waiters import ApprovalWaiters
from mcp_gateway.approvals.worker import ApprovalWorker
from mcp_gateway.catalog.keys import KeyResolver
from mcp_gateway.catalog.lookup_limits import LookupLimits
from mcp_gateway.catalog.refresher import CHANNEL as CATALOG_CHANNEL
from mcp_gateway.catalog.refresher import Refresher, resilient_conninfo
from mcp_gateway.catalog.snapshot import Snapshot, SnapshotOptions
from mcp_gateway.inbox import page as inbox_page
from mcp_gateway.pipeline import elicitation_answers
from mcp_gateway.pipeline.calls import Pipeline
from mcp_gateway.pipeline.confirmation_tokens import REQUEST_STATES, ConfirmationSigner
from mcp_gateway.sessions.signer import SessionSigner
from mcp_gateway.sessions.terminations import CHANNEL as SESSIONS_CHANNEL
from mcp_gateway.sessions.terminations import Terminations
from mcp_gateway.transport import approval_endpoints, endpoint, resource_metadata
from mcp_gateway.transport.asgi import Receive, Scope, Send, respond
from mcp_gateway.transport.body_reads import BodyReads
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.rate_limits import RateLimiter
from mcp_gateway.transport.state import GatewayState
from mcp_gateway.transport.streams import StreamHub
from mcp_gateway.upkeep.backlog import BacklogGauges
from mcp_gateway.upkeep.call_log import CallLogWriter
from mcp_gateway.upkeep.health import DatabaseHealth
from mcp_gateway.upkeep.lifecycle import Service, Services
from mcp_gateway.upkeep.metrics import (
    DATABASE_REACHABLE,
    SNAPSHOT_AGE,
    SNAPSHOT_VERSION,
    UNFINISHED_BODIES,
    start_metrics_server,
)
from mcp_gateway.upkeep.notifications import Notifications
from mcp_gateway.upkeep.replicas import Replicas
from mcp_gateway.upkeep.retention import Pruner
from mcp_gateway.vocabulary.jsonrpc import encode
from mcp_gateway.webhooks import outbox
from mcp_gateway.webhooks.deliverer import DeliveryOptions, WebhookDeliverer
from mcp_gateway.webhooks.outbox import CHANNEL as WEBHOOKS_CHANNEL
from shared import tracing
from shared.crypto import KeyHasher, SecretBox
from shared.db import open_pool
from shared.engine.outbound import ExecutorConfig, UpstreamExecutor
from shared.engine.spec import RateLimit
from shared.engine.ssrf import AddressPolicy
from shared.forwarded import behind_trusted_proxies
from shared.identity.fetching import executor_fetch, executor_post
from shared.identity.jwks_cache import JwksCache
from shared.identity.metadata_cache import MetadataCache
from shared.identity.provider_sets import IdentityParts
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
        self._services = Services([])
        self._chained_signals: dict[int, Any] = {}  # signal -> the handler we chained to
        self._on_signal: list[Callable[[], None]] = []
        self._notifications: Notifications | None = None
        # Behind the proxies it names, the client address is the one they forwarded
        # (docs/architecture.md, "Keys": the per-address look-up limit counts by it).
        self._http = behind_trusted_proxies(self._serve_http, settings.trusted_proxies)

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
        elif resource := resource_metadata.PATH.fullmatch(path):
            await resource_metadata.handle(state, scope, send, resource[1], resource[2])
        elif approvals := approval_endpoints.PATH.fullmatch(path):
            await approval_endpoints.handle(state, scope, receive, send, approvals)
        elif path == "/healthz":
            await respond(send, 200, encode({"status": "ok"}))
        elif path == "/readyz":
            await self._readyz(state, send)
        else:
            await respond(send, 404, ProtocolError(404, "no such path").problem_body())

    async def _readyz(self, state: GatewayState, send: Send) -> None:
        catalog, health = state.catalog, state.health
        body: dict[str, Any] = {
            "status": "ready" if catalog.ready else "degraded",
            "snapshot_version": catalog.snapshot.version,
            "snapshot_age_s": round(time.monotonic() - health.last_success, 3)
            if catalog.loaded
            else None,
            "database_reachable": health.reachable,
            "listening": self._listening(),
            "replicas": state.replicas.count,  # live gateway processes sharing rate limits
        }
        if not catalog.loaded:
            body["status"] = "starting"
        # Degraded still serves the last snapshot; 503 tells load balancers and humans.
        await respond(send, 200 if catalog.ready else 503, encode(body))

    def _listening(self) -> bool:
        return self._notifications is not None and self._notifications.listening

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
                log.info("gateway_stopping")
                await self._services.stop()
                tracing.shutdown()  # export the spans still buffered
                log.info("gateway_stopped")
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
        box = SecretBox(self.secret_key, settings.secret_key_previous)
        health = DatabaseHealth()
        notifications = Notifications(conninfo, enabled=settings.mcp_listen)
        self._notifications = notifications
        streams = StreamHub()
        keys: KeyResolver

        def swapped(old: Snapshot, new: Snapshot) -> None:
            keys.snapshot_swapped(new)
            streams.snapshot_swapped(old, new)
            SNAPSHOT_VERSION.set(new.version)

        executor = UpstreamExecutor(
            AddressPolicy.from_settings(
                allow_private_upstreams=settings.allow_private_upstreams,
                upstream_allowlist=settings.upstream_allowlist,
                allow_loopback_upstreams=settings.allow_loopback_upstreams,
            ),
            ExecutorConfig.from_settings(settings),
        )
        # IdP metadata, keys and introspection go through the executor's SSRF guard.
        identity = IdentityParts(
            MetadataCache(executor_fetch(executor)),
            JwksCache(executor_fetch(executor)),
            executor_post(executor),
        )
        catalog = Refresher(
            conninfo,
            refresh_s=settings.mcp_refresh_ms / 1000,
            health=health,
            on_swap=swapped,
            snapshot_conninfo=resilient_conninfo(settings.snapshot_database_url)
            if settings.snapshot_database_url
            else None,
            options=SnapshotOptions(
                page_size=settings.mcp_tools_page_size,
                language=settings.language,
                box=box,
                identity=identity,
                public_url=settings.public_url,
                path_prefix=settings.public_path_prefix,
            ),
        )
        keys = KeyResolver(
            KeyHasher(self.secret_key, settings.secret_key_previous),
            pool,
            database_reachable=lambda: health.reachable,
            limits=LookupLimits(
                parse_rate_limit(settings.key_lookup_limit),
                parse_rate_limit(settings.key_lookup_limit_per_address),
            ),
        )
        ended_sessions = Terminations(pool, health, refresh_s=settings.mcp_refresh_ms / 1000)
        call_log = CallLogWriter(pool, interval_s=settings.call_log_flush_ms / 1000)
        key_use = LastUseRecorder("api_keys")
        replicas = Replicas(pool)
        approval_waiters = ApprovalWaiters(pool)
        answer_waiters = elicitation_answers.answer_waiters(pool)
        snapshot = lambda: catalog.snapshot  # noqa: E731 - read at each use
        webhooks = WebhookDeliverer(
            pool,
            executor,
            owner=replicas.replica_id,
            snapshot=snapshot,
            box=box,
            options=DeliveryOptions(
                public_url=settings.public_url,
                path_prefix=settings.public_path_prefix,
                retry_base_s=settings.webhook_retry_base_ms / 1000,
                max_age_s=settings.webhook_max_age_s,
            ),
        )
        approvals = ApprovalWorker(
            pool,
            executor,
            owner=replicas.replica_id,
            snapshot=snapshot,
            box=box,
            call_log=call_log,
            language=settings.language,
            concurrency=settings.approval_workers,
        )
        pruner = Pruner(pool, settings, extra=[approvals_store.retention_rule(settings)])
        expiry = ExpirySweeper(pool)
        body_reads = BodyReads(settings.mcp_body_timeout_s, settings.mcp_unfinished_bodies_per_key)
        backlog = BacklogGauges(pool, [approvals_store.BACKLOG_COLUMNS, outbox.BACKLOG_COLUMNS])
        for channel, callback, on_loss in (
            (CATALOG_CHANNEL, catalog.wake, True),
            (SESSIONS_CHANNEL, ended_sessions.wake, False),
            (APPROVALS_CHANNEL, lambda _payload: approvals.wake(), False),
            (WEBHOOKS_CHANNEL, lambda _payload: webhooks.wake(), False),
            (FINISHED_CHANNEL, approval_waiters.finished, False),
            (elicitation_answers.CHANNEL, answer_waiters.finished, False),
        ):
            notifications.subscribe(channel, callback, on_loss=on_loss)
        # SIGTERM at once, before granian reaches the lifespan shutdown: streams and
        # waits end, the approval worker claims no more (docs/architecture.md, "Shutdown").
        self._on_signal = [
            streams.shut_down,
            approval_waiters.shut_down,
            answer_waiters.shut_down,
            approvals.stop_claiming,
        ]

        async def before_scrape() -> None:
            SNAPSHOT_AGE.set(time.monotonic() - health.last_success)
            DATABASE_REACHABLE.set(health.reachable)
            UNFINISHED_BODIES.set(len(body_reads))
            await backlog.refresh()

        metrics = _MetricsServer(settings, before_scrape)
        # Started in this order, stopped in the reverse: what starts later uses what
        # started before it (the pool, the executor, the call log), and stops first.
        self._services = Services(
            [
                Service("pool", stop=pool.close),
                Service("notifications", notifications.start, notifications.stop),
                Service("catalog", catalog.start, catalog.stop),
                Service("ended_sessions", ended_sessions.start, ended_sessions.stop),
                Service("executor", executor.start, executor.close),
                _loop("call_log", call_log),
                Service("key_use", lambda: _now(key_use.start, pool), lambda: key_use.stop(pool)),
                _loop("replicas", replicas),
                _loop("approval_waiters", approval_waiters),
                _loop("answer_waiters", answer_waiters),
                Service("streams", stop=lambda: _now(streams.shut_down)),
                _loop("webhooks", webhooks),  # stops before the executor closes
                Service(  # finishes or releases claimed approvals when it stops
                    "approvals",
                    lambda: _now(approvals.start),
                    lambda: approvals.stop(settings.approval_shutdown_grace_s),
                ),
                _loop("expiry", expiry),
                _loop("retention", pruner),
                _loop("body_reads", body_reads),
                Service("metrics", metrics.start, metrics.stop),
                Service("signals", lambda: _now(self._chain_signals), self._unchain_signals),
            ]
        )
        await self._services.start()
        self.state = GatewayState(
            settings=settings,
            pool=pool,
            catalog=catalog,
            health=health,
            keys=keys,
            sessions=SessionSigner(self.secret_key, settings.mcp_session_ttl_s),
            ended_sessions=ended_sessions,
            streams=streams,
            pipeline=Pipeline(
                settings,
                pool=pool,
                executor=executor,
                confirmations=ConfirmationSigner(self.secret_key, settings.confirmation_ttl_s),
                request_states=ConfirmationSigner(
                    self.secret_key, settings.elicitation_ttl_s, REQUEST_STATES
                ),
                approval_waiters=approval_waiters,
                answer_waiters=answer_waiters,
                call_log=call_log,
            ),
            approvals=approvals,
            key_use=key_use,
            replicas=replicas,
            limiter=RateLimiter(replicas.share),
            body_reads=body_reads,
            default_rate_limit=_rate_limit(settings),
        )
        log.info("gateway_started", snapshot_version=catalog.snapshot.version)

    def _chain_signals(self) -> None:
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
                    for step in self._on_signal:
                        loop.call_soon_threadsafe(step)
                previous(number, frame)

            signal.signal(signum, handler)
            self._chained_signals[signum] = previous

    async def _unchain_signals(self) -> None:
        while self._chained_signals:
            signum, previous = self._chained_signals.popitem()
            signal.signal(signum, previous)


class _Loop(Protocol):
    def start(self) -> None: ...
    async def stop(self) -> None: ...


def _loop(name: str, loop: _Loop) -> Service:
    """A background loop: started at once, stopped by awaiting it."""
    return Service(name, lambda: _now(loop.start), loop.stop)


async def _now(step: Callable[..., object], *args: Any) -> None:
    step(*args)


def _rate_limit(settings: Settings) -> RateLimit | None:
    default = settings.default_rate_limit()
    return RateLimit(requests=default[0], per_seconds=default[1]) if default else None


class _MetricsServer:
    """Worker i of N serves metrics on ``CRANK_METRICS_PORT + i``: each takes the first
    free port of that range (docs/architecture.md, "Gateway workers")."""

    def __init__(self, settings: Settings, before_scrape: Callable[[], Awaitable[None]]) -> None:
        self._settings = settings
        self._before_scrape = before_scrape
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        settings = self._settings
        ports = range(
            settings.metrics_port, settings.metrics_port + max(1, settings.gateway_workers)
        )
        error: OSError | None = None
        for port in ports:
            try:
                self._runner = await start_metrics_server(settings.host, port, self._before_scrape)
                return
            except OSError as exc:  # taken by another worker
                error = exc
        log.warning(
            "metrics_port_unavailable",
            ports=f"{ports.start}-{ports.stop - 1}",
            error=str(error),
        )

    async def stop(self) -> None:
        if self._runner is not None:
            with contextlib.suppress(Exception):
                await self._runner.cleanup()


def create_app(settings: Settings | None = None) -> GatewayApp:
    return GatewayApp(settings or load_settings())
