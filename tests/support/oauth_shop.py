"""The identity tests' shop (tests/identity): a real OpenID provider (tests/support/oidc.py), a loopback
upstream, workspace acme's catalog set up through the admin API's apply, and a real
gateway process that takes the provider's tokens (CRANK_PUBLIC_URL set).

Agents ``shop`` and ``other`` trust the provider and require ``shop:read``; their
tools are ``hours`` (no scope of its own) and ``ledger`` (``shop:admin``).
``Shop.replica()`` starts another gateway on the same database with the same
``CRANK_PUBLIC_URL``: replicas behind one public origin, as behind a load balancer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from aiohttp import web

from tests.support.api import Client, auth
from tests.support.gateway import Gateway, run_gateway, serve_upstream
from tests.support.oidc import OpenIDProvider, openid_provider
from tests.support.processes import free_port

WS = "/api/v1/workspaces/acme"
SHOP_PATH = "/mcp/v1/acme/shop"


def _operation(name: str, port: int, **changes: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": f"Reads the {name} of the shop. Use when the user asks for its {name}.",
        "input": {"type": "object", "properties": {}, "additionalProperties": False},
        "request": {"method": "GET", "url": f"http://127.0.0.1:{port}/{name}"},
        **changes,
    }


async def _upstream() -> web.Application:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response(
            {"path": request.path, "authorization": "Authorization" in request.headers}
        )

    app = web.Application()
    app.router.add_get("/{name}", answer)
    return app


@dataclass
class Shop:
    url: str  # the gateway (the public origin)
    resource: str  # agent shop's canonical URL
    key: str  # an agent key of shop
    idp: OpenIDProvider
    http: httpx.AsyncClient
    gateway: Gateway
    database_url: str = field(repr=False)
    tmp_path: Path = field(repr=False)
    env: dict[str, str] = field(repr=False)

    async def token(self, scope: str, resource: str | None = None, login: str = "dana") -> str:
        tokens = await self.idp.sign_in(
            login, resource=resource or self.resource, scope=f"openid {scope}".strip()
        )
        return tokens.access_token

    def replica(self) -> AbstractAsyncContextManager[Gateway]:
        """Another gateway on the shop's database, with the same CRANK_PUBLIC_URL."""
        return run_gateway(self.database_url, self.tmp_path, extra_env=self.env)


@asynccontextmanager
async def open_shop(
    client: Client,
    admin_token: str,
    database_url: str,
    tmp_path: Path,
    *,
    access_token_ttl_s: int = 600,
    rate_limit: dict[str, int] | None = None,
) -> AsyncIterator[Shop]:
    """The shop, its provider's access tokens living ``access_token_ttl_s``, its agents
    limited to ``rate_limit`` (``{"requests", "per_seconds"}``) when one is given."""
    created = await client.post(
        "/api/v1/workspaces", json={"slug": "acme"}, headers=auth(admin_token)
    )
    assert created.status_code == 201, created.text
    async with (
        openid_provider(
            tmp_path, scopes="shop:read shop:admin", access_token_ttl_s=access_token_ttl_s
        ) as idp,
        serve_upstream(await _upstream()) as upstream_port,
    ):
        limits = {"rate_limit": rate_limit} if rate_limit else {}
        file = {
            "workspace": "acme",
            "identity_providers": [{"name": "local", "issuer": idp.issuer}],
            "operations": [
                _operation("hours", upstream_port),
                _operation("ledger", upstream_port, scopes=["shop:admin"]),
            ],
            "agents": [
                {
                    "slug": slug,
                    "title": f"The {slug}",
                    "operations": ["hours", "ledger"],
                    "auth": {"providers": ["local"], "scopes": ["shop:read"]},
                    **limits,
                }
                for slug in ("shop", "other")
            ],
        }
        applied = await client.post(
            f"{WS}/apply", params={"publish": "true"}, json=file, headers=auth(admin_token)
        )
        assert applied.status_code == 200, applied.text
        key = await client.post(f"{WS}/keys", json={"agent": "shop"}, headers=auth(admin_token))
        assert key.status_code == 201, key.text
        port = free_port()
        public = f"http://127.0.0.1:{port}"
        env = {"CRANK_PUBLIC_URL": public, "CRANK_ALLOW_LOOPBACK_UPSTREAMS": "true"}
        async with (
            run_gateway(database_url, tmp_path, port=port, extra_env=env) as gateway,
            httpx.AsyncClient(base_url=public, timeout=20) as http,
        ):
            yield Shop(
                public,
                f"{public}{SHOP_PATH}",
                key.json()["key"],
                idp,
                http,
                gateway,
                database_url,
                tmp_path,
                env,
            )
