"""Throughput of the gateway's tools/list and ping against a bare ASGI baseline.

    .venv/bin/python bench/gateway_tools_list.py [--seconds 10] [--concurrency 16]

Needs a PostgreSQL (CRANK_BENCH_DATABASE_URL, default the local server); it
creates and drops its own database. Both servers run under granian with one
worker; the load comes from this process (aiohttp, keep-alive), so absolute
numbers are bounded by the client too: read the ratio, measured in the same
run on the same machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import psycopg
from litestar.testing import AsyncTestClient
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from control_plane.app import create_app  # noqa: E402
from control_plane.services.tokens import create_admin_token  # noqa: E402
from shared.crypto import KeyHasher  # noqa: E402
from shared.db import connect  # noqa: E402
from shared.migrate import migrate  # noqa: E402
from shared.settings import Settings  # noqa: E402

SECRET = "bench-secret-key-that-is-long-enough-0123456789"  # noqa: S105 - throwaway bench db
PATH = "/mcp/v1/bench/rates"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def seed(url: str) -> str:
    await migrate(url)
    async with await connect(url) as conn:
        admin = (
            await create_admin_token(conn, KeyHasher(SECRET), name="bench", role="admin")
        ).token
        await conn.commit()
    h = {"Authorization": f"Bearer {admin}"}
    spec = {
        "name": "latest_rate",
        "description": "Gets the latest exchange rate. Use when asked for a rate.",
        "input": {
            "type": "object",
            "properties": {"base": {"type": "string", "description": "from"}},
            "required": ["base"],
        },
        "request": {"method": "GET", "url": "https://api.example.com/latest"},
    }
    app = create_app(Settings(database_url=url, secret_key=SECRET))
    async with AsyncTestClient(app=app) as client:
        await client.post("/api/v1/workspaces", json={"slug": "bench"}, headers=h)
        base = "/api/v1/workspaces/bench"
        op = await client.post(f"{base}/operations", json=spec, headers=h)
        await client.post(
            f"{base}/operations/latest_rate/publish", headers={**h, "If-Match": op.headers["etag"]}
        )
        agent = await client.post(
            f"{base}/agents", json={"slug": "rates", "operations": ["latest_rate"]}, headers=h
        )
        await client.post(
            f"{base}/agents/rates/publish", headers={**h, "If-Match": agent.headers["etag"]}
        )
        key = await client.post(f"{base}/keys", json={"agent": "rates"}, headers=h)
        return str(key.json()["key"])


def serve(target: str, port: int, env: dict[str, str], factory: bool) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "granian",
        "--interface",
        "asgi",
        "--no-ws",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--log-level",
        "warning",
    ]
    if factory:
        argv.append("--factory")
    return subprocess.Popen(
        [*argv, target], env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


async def wait_up(url: str) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(url) as response:
                    if response.status < 500:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not come up")


async def load(
    url: str, body: bytes, headers: dict[str, str], seconds: float, concurrency: int
) -> float:
    done = 0
    stop = time.monotonic() + seconds
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:

        async def worker() -> None:
            nonlocal done
            while time.monotonic() < stop:
                async with http.post(url, data=body, headers=headers) as response:
                    await response.read()
                    assert response.status == 200, response.status
                done += 1

        started = time.monotonic()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return done / (time.monotonic() - started)


async def main(seconds: float, concurrency: int) -> None:
    server = os.environ.get(
        "CRANK_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    name = f"crank_bench_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")  # type: ignore[arg-type]
    params = conninfo_to_dict(server)
    params["dbname"] = name
    url = make_conninfo(**params)  # type: ignore[arg-type]
    processes: list[subprocess.Popen[bytes]] = []
    try:
        key = await seed(url)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
        env |= {
            "CRANK_DATABASE_URL": url,
            "CRANK_SECRET_KEY": SECRET,
            "CRANK_METRICS_PORT": str(free_port()),
            "PYTHONPATH": str(ROOT),
        }
        gateway_port, echo_port = free_port(), free_port()
        processes.append(serve("mcp_gateway.app:create_app", gateway_port, env, factory=True))
        processes.append(serve("bench.echo_app:app", echo_port, env, factory=False))
        await wait_up(f"http://127.0.0.1:{gateway_port}/readyz")
        await wait_up(f"http://127.0.0.1:{echo_port}/")
        gateway = f"http://127.0.0.1:{gateway_port}{PATH}"
        auth = {
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        async with aiohttp.ClientSession() as http:
            init = b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}'
            async with http.post(gateway, data=init, headers=auth) as response:
                session = response.headers["mcp-session-id"]
        in_session = {**auth, "MCP-Session-Id": session}
        ping = b'{"jsonrpc":"2.0","id":1,"method":"ping"}'
        tools = b'{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}'
        await load(gateway, tools, in_session, 1.0, concurrency)  # warm-up
        baseline = await load(
            f"http://127.0.0.1:{echo_port}/",
            ping,
            {"Content-Type": "application/json"},
            seconds,
            concurrency,
        )
        listed = await load(gateway, tools, in_session, seconds, concurrency)
        pinged = await load(gateway, ping, in_session, seconds, concurrency)
        print(
            f"concurrency {concurrency}, {seconds:.0f} s each, granian 1 worker, client in this process"
        )
        print(f"bare ASGI baseline      {baseline:8.0f} req/s   1.00")
        print(f"gateway tools/list      {listed:8.0f} req/s   {listed / baseline:.2f}")
        print(f"gateway ping            {pinged:8.0f} req/s   {pinged / baseline:.2f}")
    finally:
        for process in processes:
            process.terminate()
            process.wait(timeout=10)
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")  # type: ignore[arg-type]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()
    asyncio.run(main(args.seconds, args.concurrency))
