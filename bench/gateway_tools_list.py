"""tools/list of a 128-tool agent and initialize, against a bare ASGI app, in one run.

    .venv/bin/python bench/gateway_tools_list.py [--seconds 10] [--tools 128]

Needs wrk, taskset, two CPUs and a PostgreSQL (``CRANK_BENCH_DATABASE_URL``,
default the local server); it creates and drops its own database. The agent
gets ``--tools`` published operations (128 is the linter's limit per agent).
Both servers run under granian with one worker on the first CPU; wrk runs on
the second (the harness of bench/gateway_tools_call.py). One connection gives
the unloaded latency the performance targets name (tools/list and initialize
p50 ≤ 1 ms); 16 connections give throughput. The baseline is
bench/echo_app.py, a bare ASGI app answering a fixed JSON-RPC result, measured
in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import aiohttp
import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gateway_tools_call import (  # noqa: E402
    LEGACY_VERSION,
    MODERN_VERSION,
    WrkResult,
    free_port,
    initialize_message,
    run_wrk,
    serve,
    stop,
    wait_up,
    write_lua,
)
from bench.harness import SECRET, admin_api, create_database, drop_database  # noqa: E402
from shared.logging import configure_logging  # noqa: E402

PATH = "/mcp/v1/bench/catalog"
TARGET_P50_MS = 1.0
_NOUNS = ("invoice", "order", "customer", "shipment", "refund", "ticket", "product", "coupon")


def operation(index: int) -> dict[str, Any]:
    noun = _NOUNS[index % len(_NOUNS)]
    return {
        "name": f"get_{noun}_{index:03d}",
        "description": (
            f"Gets one {noun} of ledger {index} by its id. Use when the user asks about "
            f"a {noun} of ledger {index}."
        ),
        "input": {
            "type": "object",
            "properties": {
                "id": {"type": "string", "pattern": "^[a-z0-9-]{1,40}$", "description": "the id"},
                "expand": {"type": "boolean", "description": "include line items"},
            },
            "required": ["id"],
            "additionalProperties": False,
        },
        "request": {"method": "GET", "url": f"https://api.example.com/{noun}s/{{id}}"},
        "response": {"select": "{id: id, status: status}", "max_items": 20},
    }


async def seed(url: str, tools: int) -> str:
    async with admin_api(url) as checked:
        await checked("POST", "/api/v1/workspaces", json={"slug": "bench"})
        base = "/api/v1/workspaces/bench"
        names = []
        for index in range(tools):
            spec = operation(index)
            op = await checked("POST", f"{base}/operations", json=spec)
            await checked(
                "POST",
                f"{base}/operations/{spec['name']}/publish",
                h={"If-Match": op.headers["etag"]},
            )
            names.append(spec["name"])
        agent = await checked(
            "POST", f"{base}/agents", json={"slug": "catalog", "operations": names}
        )
        await checked(
            "POST", f"{base}/agents/catalog/publish", h={"If-Match": agent.headers["etag"]}
        )
        key = await checked("POST", f"{base}/keys", json={"agent": "catalog"})
        return str(key.json()["key"])


def rpc(method: str, *, modern: bool) -> str:
    params: dict[str, Any] = {}
    if modern:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    return msgspec.json.encode(
        {"jsonrpc": "2.0", "id": 2, "method": method, "params": params}
    ).decode()


async def listed_tools(url: str, headers: dict[str, str], body: str) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=body.encode(), headers=headers) as response,
    ):
        answer = msgspec.json.decode(await response.read())
    return len(answer["result"]["tools"])


def line(label: str, w: WrkResult, base: WrkResult) -> str:
    return (
        f"{label:34}{w.rps:>8.0f}{w.p50_ms:>8.2f}{w.p99_ms:>8.2f}{w.rps / base.rps:>10.2f}"
        f"{w.socket_errors + w.non_2xx:>6}"
    )


async def main(seconds: float, tools: int) -> int:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2 or shutil.which("wrk") is None:
        print("needs two CPUs and wrk (apt install wrk)", file=sys.stderr)
        return 2
    server_cpu, client_cpu = cpus[0], cpus[1]
    configure_logging("warning", json=False)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server, name, url = create_database("list")
    workdir = Path(tempfile.mkdtemp(prefix="crank-bench-list-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        key = await seed(url, tools)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
        env |= {"PYTHONPATH": str(ROOT)}
        gateway_env = env | {
            "CRANK_DATABASE_URL": url,
            "CRANK_SECRET_KEY": SECRET,
            "CRANK_METRICS_PORT": str(free_port()),
            "CRANK_RATE_LIMIT": "off",
            "CRANK_LOG_LEVEL": "warning",
        }
        gateway_port, echo_port = free_port(), free_port()
        logs = {n: workdir / f"{n}.log" for n in ("gateway", "echo")}
        gateway_process = serve(
            server_cpu,
            "mcp_gateway.app:create_app",
            gateway_port,
            gateway_env,
            factory=True,
            log=logs["gateway"],
            loop="auto",
        )
        echo = serve(
            server_cpu, "bench.echo_app:app", echo_port, env, factory=False, log=logs["echo"]
        )
        processes += [gateway_process, echo]
        await wait_up(f"http://127.0.0.1:{gateway_port}/readyz", gateway_process, logs["gateway"])
        await wait_up(f"http://127.0.0.1:{echo_port}/", echo, logs["echo"])
        gateway = f"http://127.0.0.1:{gateway_port}{PATH}"
        auth = {
            "Authorization": f"Bearer {key}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        async with (
            aiohttp.ClientSession() as http,
            http.post(gateway, data=initialize_message(), headers=auth) as response,
        ):
            session = response.headers["mcp-session-id"]
        legacy = auth | {"MCP-Session-Id": session, "MCP-Protocol-Version": LEGACY_VERSION}
        modern = auth | {
            "MCP-Protocol-Version": MODERN_VERSION,
            "Mcp-Method": "tools/list",
        }
        scripts = {
            "bare ASGI app (baseline)": (
                f"http://127.0.0.1:{echo_port}/",
                write_lua(workdir, "echo", "POST", rpc("ping", modern=False), {}),
            ),
            f"tools/list {LEGACY_VERSION}": (
                gateway,
                write_lua(workdir, "list-legacy", "POST", rpc("tools/list", modern=False), legacy),
            ),
            f"tools/list {MODERN_VERSION}": (
                gateway,
                write_lua(workdir, "list-modern", "POST", rpc("tools/list", modern=True), modern),
            ),
            f"initialize {LEGACY_VERSION}": (
                gateway,
                write_lua(workdir, "init", "POST", initialize_message().decode(), auth),
            ),
        }
        for era_headers, is_modern in ((legacy, False), (modern, True)):
            count = await listed_tools(gateway, era_headers, rpc("tools/list", modern=is_modern))
            if count != tools:
                raise RuntimeError(f"tools/list listed {count} tools, not {tools}")
        print(f"verified: tools/list returns {tools} tools in both eras")
        for target, script in scripts.values():  # warm-up
            run_wrk(client_cpu, target, script, 16, 2)
        for connections in (1, 16):
            results = {
                label: run_wrk(client_cpu, target, script, connections, seconds)
                for label, (target, script) in scripts.items()
            }
            base = next(iter(results.values()))
            print(f"\n{connections} connection{'s' if connections > 1 else ''}, {seconds:g} s each")
            print(f"{'':34}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'/baseline':>10}{'err':>6}")
            for label, result in results.items():
                print(line(label, result, base))
            if connections == 1:
                for label, result in list(results.items())[1:]:
                    met = "met" if result.p50_ms <= TARGET_P50_MS else "MISSED"
                    print(f"  {label}: p50 {result.p50_ms:.2f} ms ({met}: <= {TARGET_P50_MS} ms)")
        return 0
    finally:
        for process in reversed(processes):
            stop(process)
        shutil.rmtree(workdir, ignore_errors=True)
        drop_database(server, name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--tools", type=int, default=128, help="tools of the agent (default 128)")
    args = parser.parse_args()
    sys.exit(asyncio.run(main(args.seconds, args.tools)))
