"""Real gateway processes for the tests: granian serving mcp_gateway.app, the
catalog set up through the real control-plane API, stand-in upstreams on
loopback, and the demo (sales API, seed, allowlisting gateway)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import httpx
import structlog
from aiohttp import web

from control_plane.cli.devkeys import ensure_api_key
from control_plane.cli.seed import ensure_workspace, seed_demo
from control_plane.demo import DEMO_WORKSPACE
from control_plane.demo.sales_api import create_app as create_sales_app
from shared.crypto import KeyHasher
from shared.db import connect
from tests.support.api import Client, auth
from tests.support.db import TEST_SECRET_KEY
from tests.support.processes import free_port

SEED_URL_PATH = "/mcp/v1/default/currency-rates"

FRANKFURTER: dict[str, Any] = {
    "name": "frankfurter_latest_rate",
    "title": "Latest exchange rate",
    "description": (
        "Gets the latest exchange rate between two currencies. Use when the user asks what one "
        "currency is worth in another today. Returns base, date and rates."
    ),
    "input": {
        "type": "object",
        "properties": {
            "base": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 from"},
            "quote": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 to"},
        },
        "required": ["base", "quote"],
        "additionalProperties": False,
    },
    "request": {
        "method": "GET",
        "url": "https://api.frankfurter.dev/v1/latest",
        "query": {"base": "base", "symbols": "quote"},
    },
    "response": {"select": "{base: base, date: date, rates: rates}"},
}


@asynccontextmanager
async def serve_upstream(
    app: web.Application, port: int | None = None, *, handler_cancellation: bool = False
) -> AsyncIterator[int]:
    """``app`` served on 127.0.0.1:``port`` (a free one by default) for the block; yields
    the port. ``handler_cancellation``: a caller that drops the connection cancels the
    handler."""
    port = free_port() if port is None else port
    runner = web.AppRunner(app, access_log=None, handler_cancellation=handler_cancellation)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", port).start()
        yield port
    finally:
        await runner.cleanup()


@asynccontextmanager
async def serve_no_http() -> AsyncIterator[int]:
    """An upstream on 127.0.0.1 that answers every request with bytes that are no HTTP
    (``upstream_response_invalid``); yields its port."""

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"SSH-2.0-not-http\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(garbage, "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1]
    finally:
        server.close()
        await server.wait_closed()


@dataclass
class Catalog:
    admin: str
    agent_key: str  # currency-rates
    other_key: str  # agent "other" in the same workspace
    approval_key: str  # currency-rates, kind approval


async def seed_catalog(client: Client, admin: str) -> Catalog:
    """Workspace default: currency-rates (published, frankfurter), other (published), draft-only."""
    h = auth(admin)

    async def ok(response: Any) -> Any:
        assert response.is_success, response.text
        return response

    await ok(await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=h))
    base = "/api/v1/workspaces/default"
    op = await ok(await client.post(f"{base}/operations", json=FRANKFURTER, headers=h))
    await ok(
        await client.post(
            f"{base}/operations/frankfurter_latest_rate/publish",
            headers=auth(admin, op.headers["etag"]),
        )
    )
    keys: dict[str, str] = {}
    for slug in ("currency-rates", "other", "unpublished"):
        body = {
            "slug": slug,
            "title": slug.title(),
            "description": f"The {slug} agent.",
            "operations": ["frankfurter_latest_rate"],
        }
        agent = await ok(await client.post(f"{base}/agents", json=body, headers=h))
        if slug != "unpublished":
            await ok(
                await client.post(
                    f"{base}/agents/{slug}/publish", headers=auth(admin, agent.headers["etag"])
                )
            )
        created = await ok(await client.post(f"{base}/keys", json={"agent": slug}, headers=h))
        keys[slug] = created.json()["key"]
    approval = await ok(
        await client.post(
            f"{base}/keys", json={"agent": "currency-rates", "kind": "approval"}, headers=h
        )
    )
    return Catalog(admin, keys["currency-rates"], keys["other"], approval.json()["key"])


async def change_agent(
    client: Client, admin: str, changes: dict[str, Any], slug: str = "currency-rates"
) -> None:
    """Change an agent's draft in workspace default (by default currency-rates, of
    ``seed_catalog``) by ``changes`` and publish it."""
    base = f"/api/v1/workspaces/default/agents/{slug}"
    read = await client.get(base, headers=auth(admin))
    draft = {**read.json()["draft"], **changes}
    put = await client.put(base, json=draft, headers=auth(admin, read.headers["etag"]))
    assert put.is_success, put.text
    published = await client.post(f"{base}/publish", headers=auth(admin, put.headers["etag"]))
    assert published.is_success, published.text


async def limit_agent(client: Client, admin: str, requests: int, per_seconds: int) -> None:
    """Give currency-rates a rate_limit and publish it."""
    await change_agent(
        client, admin, {"rate_limit": {"requests": requests, "per_seconds": per_seconds}}
    )


@dataclass
class Served:
    """A Crank process served by granian on loopback, its output in ``log_path``."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return _read(self.log_path)


def _read(path: Path) -> str:
    return path.read_text(errors="replace")


@dataclass
class Gateway(Served):
    metrics_port: int


GATEWAY_APP = "mcp_gateway.app:create_app"
CONTROL_PLANE_APP = "control_plane.app:create_app"


def _spawn(
    port: int, env: dict[str, str], log_path: Path, app: str = GATEWAY_APP
) -> subprocess.Popen[bytes]:
    with log_path.open("wb") as log_file:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "granian",
                "--interface",
                "asgi",
                "--factory",
                "--no-ws",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                app,
            ],
            env=env,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


@asynccontextmanager
async def _serve(
    app: str, env: dict[str, str], log_path: Path, port: int
) -> AsyncIterator[subprocess.Popen[bytes]]:
    """``app`` under granian until the block ends, once its /readyz answers 200."""
    process = _spawn(port, env, log_path, app)
    try:
        deadline = time.monotonic() + 30
        async with httpx.AsyncClient() as http:
            while True:
                assert process.poll() is None, f"{app} exited: {_read(log_path)}"
                try:
                    if (await http.get(f"http://127.0.0.1:{port}/readyz")).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, f"{app} not ready: {_read(log_path)}"
                await asyncio.sleep(0.1)
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)


def _env(database_url: str, extra_env: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
    return env | {
        "CRANK_DATABASE_URL": database_url,
        "CRANK_SECRET_KEY": TEST_SECRET_KEY,
        **(extra_env or {}),
    }


@asynccontextmanager
async def run_gateway(
    database_url: str,
    tmp_path: Path,
    *,
    refresh_ms: int = 5000,
    extra_env: dict[str, str] | None = None,
    port: int | None = None,
) -> AsyncIterator[Gateway]:
    """A gateway on ``port`` (a free one by default: a control plane that must name the
    gateway's URL before it starts picks one first)."""
    port, metrics_port = port or free_port(), free_port()
    env = _env(
        database_url,
        {
            "CRANK_MCP_REFRESH_MS": str(refresh_ms),
            "CRANK_METRICS_PORT": str(metrics_port),
            **(extra_env or {}),
        },
    )
    log_path = tmp_path / f"gateway-{port}.log"
    async with _serve(GATEWAY_APP, env, log_path, port) as process:
        yield Gateway(process, port, log_path, metrics_port)


@asynccontextmanager
async def run_control_plane(
    database_url: str, tmp_path: Path, *, extra_env: dict[str, str] | None = None
) -> AsyncIterator[Served]:
    """The control plane as deployed (granian), its structlog output in its log file."""
    port = free_port()
    log_path = tmp_path / f"control-plane-{port}.log"
    async with _serve(CONTROL_PLANE_APP, _env(database_url, extra_env), log_path, port) as process:
        yield Served(process, port, log_path)


@dataclass
class DemoGateway:
    gateway: Gateway
    sales_port: int  # the demo sales API (control_plane.demo.sales_api)
    agent_key: str  # the demo's sales agent
    approval_key: str  # sales, kind approval


@asynccontextmanager
async def demo_gateway(database_url: str, tmp_path: Path) -> AsyncIterator[DemoGateway]:
    """The demo as ``crank up`` runs it: the demo sales API on a free loopback port, the
    demo seeded as ``crank seed-demo`` seeds it (its sales URLs on that port), and a
    gateway allowlisting exactly that port. ``database_url``'s schema must be migrated."""
    async with serve_upstream(create_sales_app()) as sales_port:
        async with await connect(database_url) as conn:
            await seed_demo(conn, sales_port=sales_port)
            workspace = await ensure_workspace(conn, DEMO_WORKSPACE, "tests")
            hasher = KeyHasher(TEST_SECRET_KEY)
            agent_key = await ensure_api_key(
                conn, hasher, workspace, "tests", agent="sales", kind="agent", saved=None
            )
            approval_key = await ensure_api_key(
                conn, hasher, workspace, "tests", agent="sales", kind="approval", saved=None
            )
            await conn.commit()
        env = {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{sales_port}"}
        async with run_gateway(database_url, tmp_path, extra_env=env) as gateway:
            yield DemoGateway(gateway, sales_port, agent_key, approval_key)


async def wait_until(predicate: Any, timeout_s: float = 10.0, interval_s: float = 0.05) -> None:
    deadline = time.monotonic() + timeout_s
    while not await predicate():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(interval_s)


class Background(Protocol):
    """An owner of a background loop (shared.periodic), e.g. retention.Pruner."""

    def start(self) -> None: ...

    async def stop(self) -> None: ...


async def run_until(
    loop: Background, predicate: Any, timeout_s: float = 10.0
) -> list[MutableMapping[str, Any]]:
    """Start ``loop``, wait until ``predicate()`` holds, stop it; returns what was logged."""
    with structlog.testing.capture_logs() as logs:
        loop.start()
        try:
            await wait_until(predicate, timeout_s)
        finally:
            await loop.stop()
    return logs
