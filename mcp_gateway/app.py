"""The gateway's ASGI app: ``granian --interface asgi --factory mcp_gateway.app:create_app``.

One ASGI callable fronts the process: the MCP endpoint
(``/mcp/v1/{workspace}/{agent}`` and ``/v1/...``) goes straight to the lean
handler; ``/healthz`` and ``/readyz`` are answered here. Metrics have their own
port (``CRANK_METRICS_PORT``).
"""

from __future__ import annotations

import contextlib
import re
import time
from typing import Any

import structlog
from aiohttp import web

from mcp_gateway import endpoint
from mcp_gateway.asgi import Receive, Scope, Send, respond
from mcp_gateway.jsonrpc import encode
from mcp_gateway.keys import KeyResolver
from mcp_gateway.metrics import SNAPSHOT_VERSION, start_metrics_server
from mcp_gateway.refresher import Refresher
from mcp_gateway.sessions import SessionSigner
from mcp_gateway.snapshot import Snapshot
from mcp_gateway.state import GatewayState
from mcp_gateway.streams import StreamHub
from shared.crypto import KeyHasher
from shared.db import open_pool
from shared.logging import configure_logging
from shared.settings import Settings, SettingsError, load_settings

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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        match = MCP_PATH.match(path)
        state = self.state
        if state is None:
            await respond(send, 503, encode({"status": "starting"}))
        elif match:
            await endpoint.handle(state, scope, receive, send, match[1], match[2])
        elif path == "/healthz":
            await respond(send, 200, encode({"status": "ok"}))
        elif path == "/readyz":
            await self._readyz(state, send)
        else:
            await respond(send, 404, encode({"code": "not_found", "message": "no such path"}))

    async def _readyz(self, state: GatewayState, send: Send) -> None:
        refresher = state.refresher
        body: dict[str, Any] = {
            "status": "ready" if refresher.ready else "degraded",
            "snapshot_version": refresher.snapshot.version,
            "snapshot_age_s": round(time.monotonic() - refresher.last_success, 3)
            if refresher.loaded
            else None,
            "listening": refresher.listening,
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
        assert settings.database_url is not None
        # Autocommit: the gateway mostly reads; multi-statement work opens its own transaction.
        pool = await open_pool(
            settings.database_url, max_size=settings.db_pool_size, name="gateway", autocommit=True
        )
        streams = StreamHub()
        keys = KeyResolver(KeyHasher(self.secret_key, settings.secret_key_previous), pool)

        def swapped(old: Snapshot, new: Snapshot) -> None:
            keys.snapshot_swapped(new)
            streams.snapshot_swapped(old, new)
            SNAPSHOT_VERSION.set(new.version)

        refresher = Refresher(
            settings.database_url,
            pool,
            refresh_s=settings.mcp_refresh_ms / 1000,
            listen=settings.mcp_listen,
            on_swap=swapped,
        )
        await refresher.start()
        self.state = GatewayState(
            settings=settings,
            pool=pool,
            refresher=refresher,
            keys=keys,
            sessions=SessionSigner(self.secret_key, settings.mcp_session_ttl_s),
            streams=streams,
        )
        try:
            self._metrics = await start_metrics_server(
                settings.host,
                settings.metrics_port,
                lambda: time.monotonic() - refresher.last_success,
            )
        except OSError as exc:  # e.g. a second worker on the same port
            log.warning("metrics_port_unavailable", port=settings.metrics_port, error=str(exc))
        log.info("gateway_started", snapshot_version=refresher.snapshot.version)

    async def _stop(self) -> None:
        if self._metrics is not None:
            with contextlib.suppress(Exception):
                await self._metrics.cleanup()
        if self.state is not None:
            await self.state.refresher.stop()
            await self.state.pool.close()


def create_app(settings: Settings | None = None) -> GatewayApp:
    return GatewayApp(settings or load_settings())
