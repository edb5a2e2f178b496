"""The control-plane ASGI app: ``granian --interface asgi --factory control_plane.app:create_app``."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager
from functools import partial

from litestar import Litestar, Router, get
from litestar.openapi import OpenAPIConfig
from litestar.openapi.plugins import JsonRenderPlugin
from litestar.openapi.spec import Components, SecurityScheme

from control_plane.access import check_declared_access
from control_plane.admission import admit
from control_plane.api_document import ValidatorConstraints, document_routes
from control_plane.api_document.docs_page import docs_router
from control_plane.console.router import (
    PREFIX as CONSOLE_PREFIX,
)
from control_plane.console.router import (
    SIGN_IN_PATHS,
    console_router,
    template_config,
)
from control_plane.deps import CrankState, dependencies
from control_plane.errors import exception_handlers
from control_plane.routes import route_handlers
from control_plane.state import AppState
from shared.address_limit import AddressLimit
from shared.crypto import KeyHasher, SecretBox
from shared.db import Connection, open_pool
from shared.engine.outbound import ExecutorConfig, UpstreamExecutor
from shared.engine.ssrf import AddressPolicy
from shared.forwarded import behind_trusted_proxies
from shared.last_use import LastUseRecorder
from shared.logging import configure_logging
from shared.settings import Settings, SettingsError, load_settings, parse_rate_limit

API_PREFIX = "/api/v1"
SCHEMA_PATH = f"{API_PREFIX}/schema"  # the OpenAPI document and docs page, served without a token


@get("/healthz", include_in_schema=False, sync_to_thread=False)
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@get("/readyz", include_in_schema=False)
async def readyz(app_state: CrankState) -> dict[str, str]:
    async with app_state.pool.connection(timeout=2) as conn:
        await conn.execute("SELECT 1")
    return {"status": "ready"}


def create_app(settings: Settings | None = None) -> Litestar:
    settings = settings or load_settings()
    configure_logging(settings.log_level)
    if not settings.database_url:
        raise SettingsError("CRANK_DATABASE_URL is not set (crank up sets it for you)")
    secret_key = settings.require_secret_key()
    database_url = settings.database_url

    @asynccontextmanager
    async def lifespan(app: Litestar) -> AsyncGenerator[None, None]:
        pool = await open_pool(database_url, max_size=settings.db_pool_size, name="control-plane")
        state = AppState(
            settings=settings,
            pool=pool,
            hasher=KeyHasher(secret_key, settings.secret_key_previous),
            box=SecretBox(secret_key, settings.secret_key_previous),
            token_use=LastUseRecorder("admin_tokens"),
            # The gateway's executor and guard, so a try-it behaves as tools/call does.
            executor=UpstreamExecutor(
                AddressPolicy.from_settings(
                    allow_private_upstreams=settings.allow_private_upstreams,
                    upstream_allowlist=settings.upstream_allowlist,
                    allow_loopback_upstreams=settings.allow_loopback_upstreams,
                ),
                ExecutorConfig.from_settings(settings),
            ),
            token_failures=AddressLimit(
                parse_rate_limit(
                    settings.admin_token_failure_limit, "CRANK_ADMIN_TOKEN_FAILURE_LIMIT"
                )
            ),
        )
        await state.executor.start()
        state.token_use.start(pool)
        app.state["crank"] = state
        try:
            yield
        finally:
            await state.token_use.stop(pool)
            await state.executor.close()
            await pool.close()

    app = Litestar(
        route_handlers=[
            healthz,
            readyz,
            Router(API_PREFIX, route_handlers=route_handlers),
            docs_router(SCHEMA_PATH),  # Swagger UI from the package, under the console's CSP
            console_router,
        ],
        template_config=template_config,
        dependencies=dependencies,
        exception_handlers=exception_handlers,
        before_request=admit,  # access, then the body (docs/architecture.md, "Request admission")
        # The client address and scheme that trusted proxies forwarded: the failed-token
        # limit counts by that address, the console cookie's Secure flag follows the scheme.
        middleware=[partial(behind_trusted_proxies, trusted_proxies=settings.trusted_proxies)],
        lifespan=[lifespan],
        # Admission reads bodies under each route's own limit; this only backs it up.
        request_max_body_size=max(settings.max_body_bytes, settings.max_document_bytes),
        signature_namespace={"Connection": Connection},
        plugins=[ValidatorConstraints()],  # the validators' constraints, in the document
        openapi_config=OpenAPIConfig(
            title="Crank control plane",
            version="1",
            description="Admin API: operations, agents, keys, secrets, the audit log and the call log.",
            path=SCHEMA_PATH,
            render_plugins=[JsonRenderPlugin(path="/openapi.json")],
            components=Components(
                security_schemes={
                    "adminToken": SecurityScheme(
                        type="http", scheme="bearer", description="crk_admin_... token"
                    )
                }
            ),
            security=[{"adminToken": []}],
        ),
    )
    check_declared_access(app.routes, under=API_PREFIX, public=(SCHEMA_PATH,), admission=admit)
    check_declared_access(app.routes, under=CONSOLE_PREFIX, public=SIGN_IN_PATHS, admission=admit)
    document_routes(app.routes, under=API_PREFIX)  # errors, If-Match, ETag, examples
    return app
