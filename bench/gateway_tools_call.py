"""tools/call through one pinned gateway worker against a direct call to the same upstream.

    .venv/bin/python bench/gateway_tools_call.py [--seconds 10] [--connections 16,64]
        [--rounds 1] [--eras legacy,modern] [--log-level warning] [--keep]

Issue 4. Needs wrk (``apt install wrk``), taskset, two CPUs and a PostgreSQL
(``CRANK_BENCH_DATABASE_URL``, default the local server); it creates and drops
its own database and seeds it in process through the control-plane app.

Set-up. The upstream is bench/rates_upstream.py, a bare ASGI app under granian
(one worker) answering ``GET /v1/latest?base=..&symbols=..`` with
frankfurter-like JSON. Two copies run: one is the *direct* target, one is the
gateway's upstream (both ``--loop asyncio``, as in issue 4). The gateway is
``mcp_gateway.app:create_app`` under granian with one worker, ``--loop`` from
``--gateway-loop`` (default auto: uvloop when installed),
``CRANK_UPSTREAM_ALLOWLIST=127.0.0.1:<port>``, ``CRANK_RATE_LIMIT=off`` and
``CRANK_LOG_LEVEL`` from ``--log-level``.

Pinning (``taskset``). The server under test owns the first CPU: the gateway
worker in the gateway runs, the direct upstream in the direct runs (the other
one idles). wrk (one thread) and the gateway's upstream share the second CPU.
Load comes from wrk with a Lua script (POST, the JSON-RPC body, the headers);
its ``done`` hook prints requests, errors and the latency percentiles.

Protocol eras. *legacy*: ``2025-06-18`` with a session opened by initialize
before wrk starts, ``Accept: application/json`` (the seed's curl lines).
*modern*: ``2026-07-28``, stateless, ``Mcp-Method``/``Mcp-Name`` headers and
the ``params._meta`` envelope.

Correctness. Before measuring, one tools/call per era must return
``isError: false`` with the expected ``structuredContent``. During each run
the upstream's request counter is read before and after: ``up/call`` is
upstream requests per completed tools/call (1.00 means every call went
through; a few in-flight requests at the end make it a hair above 1).
wrk's socket errors and non-2xx/3xx answers are reported.

Database statements per tools/call. pg_stat_statements needs a server
restart, so the bench reads ``xact_commit + xact_rollback`` of its own
database in ``pg_stat_database`` (from a connection to another database, so
the reads do not count). The gateway's pool and its refresher run in
autocommit, so every statement, pool check or probe is one transaction.
Backends flush these counters to shared memory at most once a second and an
idle one up to 10 s late, so each window runs ``--seconds`` of load plus
``SETTLE_S`` of quiet before the second read. Windows of the same length with
no load (refresher polls every ``CRANK_MCP_REFRESH_MS``, the replica
heartbeat, the LISTEN keep-alive, each with its pool check) are measured before
and after the runs, and the quieter one is the background (one-off work such
as the first retention pass lands in one of them). ``db/call`` = (load window
- idle window) / completed tools/call: 0.000x means the hot path makes no
round trip; the call log's batch (one COPY plus a pool check per
``CRANK_CALL_LOG_FLUSH_MS``) shows as ≈ 2 x window / calls. The background
loops (approval worker, heartbeat, refresher) fire late while the worker's
event loop is saturated, so a load window can hold fewer of them than the idle
one: expect |db/call| of a few thousandths either way. One statement per
hundred calls would read 0.01; one per call 1.0.

Fairness. ``--rounds N`` repeats every run, interleaved; a table shows each
row's fastest run (its latencies and ``other%`` too) while ``err``,
``non2xx``, ``up/call`` and ``db/call`` sum over all rounds. ``other%`` is the CPU time (in % of one CPU) that processes outside
the bench used during the run (``CpuMeter``); on a shared machine a run with a
large figure is not comparable with a quiet one.

Profiling. ``--keep`` leaves the servers up after the runs (until Enter) and
keeps the wrk scripts, e.g. for ``py-spy record --pid <granian worker>``
while ``taskset -c 1 wrk -t1 -c16 -d30s -s <dir>/legacy.lua <gateway URL>``
runs; the database and the directory are then left for you to drop.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import psycopg
from litestar.testing import AsyncTestClient
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.rates_upstream import DATE, RATE  # noqa: E402
from control_plane.app import create_app  # noqa: E402
from control_plane.services.tokens import create_admin_token  # noqa: E402
from shared.crypto import KeyHasher  # noqa: E402
from shared.db import connect  # noqa: E402
from shared.logging import configure_logging  # noqa: E402
from shared.migrate import migrate  # noqa: E402
from shared.settings import Settings  # noqa: E402

SECRET = "bench-secret-key-that-is-long-enough-0123456789"  # noqa: S105 - throwaway bench db
PATH = "/mcp/v1/bench/rates"
TOOL = "latest_rate"
ARGUMENTS = {"base": "USD", "quote": "EUR"}
EXPECTED = {"base": "USD", "date": DATE, "rates": {"EUR": RATE}}
FASTMCP_RPS = 190.0  # FastMCP's OpenAPI proxy, measured on this machine before Crank (issue 4)
ISSUE_DIRECT_RPS = 7700.0  # direct call measured in issue 4 with the same pinning
TARGET_DIRECT_SHARE = 0.5  # the issue's goal: half of direct
TARGET_FASTMCP_X = 10.0  # ... and at least 10x FastMCP
SETTLE_S = 11.0  # > PGSTAT_IDLE_INTERVAL (10 s): every backend has flushed its counters
WARMUP_S = 2.0
LEGACY_VERSION = "2025-06-18"
MODERN_VERSION = "2026-07-28"

LUA = """
wrk.method = "{method}"
wrk.body = {body}
{headers}
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("WRKRESULT %d %d %d %d %d %d %d %d %d\\n",
    summary.duration, summary.requests, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
"""


@dataclass(frozen=True, slots=True)
class WrkResult:
    seconds: float
    requests: int
    socket_errors: int  # connect + read + write + timeout
    non_2xx: int  # wrk's "status" errors: answers with status > 399
    p50_ms: float
    p99_ms: float

    @property
    def rps(self) -> float:
        return self.requests / self.seconds


@dataclass(frozen=True, slots=True)
class Run:
    wrk: WrkResult
    other_cpu: float  # % of one CPU used by processes outside this bench during the run
    upstream_calls: int = 0  # requests the upstream served during the run (gateway rows)
    db_window: int = 0  # transactions in the load window (gateway rows)


@dataclass(slots=True)
class Row:
    """One line of a table: the best of its rounds, and the sums over all of them."""

    label: str
    gateway: bool
    runs: list[Run] = field(default_factory=list)

    @property
    def best(self) -> Run:
        return max(self.runs, key=lambda run: run.wrk.rps)

    def upstream_per_call(self) -> float:
        return sum(r.upstream_calls for r in self.runs) / self.calls()

    def db_per_call(self, idle: int) -> float:
        return sum(r.db_window - idle for r in self.runs) / self.calls()

    def calls(self) -> int:
        return max(1, sum(r.wrk.requests for r in self.runs))


class CpuMeter:
    """CPU time used by everything else on the machine while wrk runs.

    User and system time of all CPUs (/proc/stat) minus that of the bench's process groups
    (the servers, /proc/<pid>/stat) and of wrk (a waited child, getrusage).
    Other engineers' test runs on a shared machine show up here: a run with a
    large figure is not comparable.
    """

    def __init__(self, groups: list[int]) -> None:
        self._groups = set(groups)
        self._tick = os.sysconf("SC_CLK_TCK")

    def _busy_s(self) -> float:
        with open("/proc/stat") as stat:
            fields = [int(v) for v in stat.readline().split()[1:]]
        # user + nice + system; irq and softirq time (loopback traffic) is nobody's task time
        return sum(fields[:3]) / self._tick

    def _ours_s(self) -> float:
        ticks = 0
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    fields = stat.read().rpartition(")")[2].split()
            except OSError:
                continue
            if int(fields[2]) in self._groups:  # pgrp
                ticks += int(fields[11]) + int(fields[12])  # utime + stime
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        me = resource.getrusage(resource.RUSAGE_SELF)
        return ticks / self._tick + sum(u.ru_utime + u.ru_stime for u in (children, me))

    def start(self) -> tuple[float, float, float]:
        return time.monotonic(), self._busy_s(), self._ours_s()

    def other_percent(self, started: tuple[float, float, float]) -> float:
        t0, busy0, ours0 = started
        elapsed = time.monotonic() - t0
        other = (self._busy_s() - busy0) - (self._ours_s() - ours0)
        return max(0.0, 100 * other / elapsed)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def lua_string(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def write_lua(directory: Path, name: str, method: str, body: str, headers: dict[str, str]) -> Path:
    lines = "\n".join(f"wrk.headers[{lua_string(k)}] = {lua_string(v)}" for k, v in headers.items())
    path = directory / f"{name}.lua"
    body_lua = lua_string(body) if body else "nil"
    path.write_text(LUA.format(method=method, body=body_lua, headers=lines))
    return path


def run_wrk(cpu: int, url: str, script: Path, connections: int, seconds: float) -> WrkResult:
    argv = [
        "taskset",
        "-c",
        str(cpu),
        "wrk",
        "-t1",
        f"-c{connections}",
        f"-d{max(1, round(seconds))}s",
        "--timeout",
        "10s",
        "-s",
        str(script),
        url,
    ]
    out = subprocess.run(argv, check=True, capture_output=True, text=True, timeout=seconds + 60)
    if out.stderr.strip():  # e.g. a Lua error: wrk runs on with a default request
        raise RuntimeError(f"wrk: {out.stderr}")
    for line in out.stdout.splitlines():
        if line.startswith("WRKRESULT "):
            dur, req, conn, read, write, status, tout, p50, p99 = map(int, line.split()[1:])
            return WrkResult(
                seconds=dur / 1e6,
                requests=req,
                socket_errors=conn + read + write + tout,
                non_2xx=status,
                p50_ms=p50 / 1000,
                p99_ms=p99 / 1000,
            )
    raise RuntimeError(f"wrk printed no result:\n{out.stdout}\n{out.stderr}")


async def seed(url: str, upstream_port: int) -> str:
    await migrate(url)
    async with await connect(url) as conn:
        admin = (
            await create_admin_token(conn, KeyHasher(SECRET), name="bench", role="admin")
        ).token
        await conn.commit()
    h = {"Authorization": f"Bearer {admin}"}
    spec = {
        "name": TOOL,
        "title": "Latest exchange rate",
        "description": (
            "Gets the latest exchange rate between two currencies. Use when the user asks "
            "what one currency is worth in another today."
        ),
        "input": {
            "type": "object",
            "properties": {
                "base": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "from"},
                "quote": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "to"},
            },
            "required": ["base", "quote"],
            "additionalProperties": False,
        },
        "request": {
            "method": "GET",
            "url": f"http://127.0.0.1:{upstream_port}/v1/latest",
            "query": {"base": "base", "symbols": "quote"},
            "headers": {"Accept": "application/json"},
        },
        "response": {"select": "{base: base, date: date, rates: rates}", "max_items": 50},
    }
    app = create_app(Settings(database_url=url, secret_key=SECRET))
    async with AsyncTestClient(app=app) as client:

        async def checked(method: str, path: str, **kwargs: Any) -> Any:
            response = await client.request(method, path, headers=h | kwargs.pop("h", {}), **kwargs)
            if response.status_code >= 300:
                raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
            return response

        await checked("POST", "/api/v1/workspaces", json={"slug": "bench"})
        base = "/api/v1/workspaces/bench"
        # The upstream is on loopback: the instance admin grants it to the workspace.
        egress = await checked("GET", f"{base}/egress")
        await checked(
            "PUT",
            f"{base}/egress/grants",
            json={"grants": [f"127.0.0.1:{upstream_port}"]},
            h={"If-Match": egress.headers["etag"]},
        )
        op = await checked("POST", f"{base}/operations", json=spec)
        await checked(
            "POST", f"{base}/operations/{TOOL}/publish", h={"If-Match": op.headers["etag"]}
        )
        agent = await checked(
            "POST", f"{base}/agents", json={"slug": "rates", "operations": [TOOL]}
        )
        await checked("POST", f"{base}/agents/rates/publish", h={"If-Match": agent.headers["etag"]})
        key = await checked("POST", f"{base}/keys", json={"agent": "rates"})
        return str(key.json()["key"])


def serve(
    cpu: int,
    target: str,
    port: int,
    env: dict[str, str],
    *,
    factory: bool,
    log: Path,
    loop: str = "asyncio",
) -> subprocess.Popen[bytes]:
    argv = ["taskset", "-c", str(cpu), sys.executable, "-m", "granian", "--interface", "asgi"]
    argv += ["--no-ws", "--workers", "1", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--loop", loop]
    argv += ["--log-level", "warning", "--no-access-log"]
    if factory:
        argv.append("--factory")
    with log.open("wb") as out:
        # Own session: the whole group (granian's worker included) is signalled on cleanup.
        return subprocess.Popen(
            [*argv, target], env=env, cwd=ROOT, stdout=out, stderr=out, start_new_session=True
        )


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is not None:
        return
    try:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
    except ProcessLookupError:
        pass


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def wait_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise RuntimeError(f"{url}: server exited:\n{tail(log)}")
            try:
                async with http.get(url) as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise RuntimeError(f"{url} did not come up:\n{tail(log)}")


async def upstream_count(port: int) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/_count") as response,
    ):
        return int(await response.text())


def db_transactions(server: str, name: str) -> int:
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", (name,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def call_body(modern: bool) -> str:
    params: dict[str, Any] = {"name": TOOL, "arguments": ARGUMENTS}
    if modern:
        params["_meta"] = {
            "io.modelcontextprotocol/protocolVersion": MODERN_VERSION,
            "io.modelcontextprotocol/clientCapabilities": {},
        }
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}
    return msgspec.json.encode(message).decode()


async def era_headers(gateway: str, key: str, era: str) -> dict[str, str]:
    headers = {
        "Authorization": f"Bearer {key}",
        "Content-Type": "application/json",
        "Accept": "application/json",
    }
    if era == "modern":
        return headers | {
            "MCP-Protocol-Version": MODERN_VERSION,
            "Mcp-Method": "tools/call",
            "Mcp-Name": TOOL,
        }
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": LEGACY_VERSION,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    async with (
        aiohttp.ClientSession() as http,
        http.post(gateway, data=msgspec.json.encode(init), headers=headers) as response,
    ):
        session = response.headers["mcp-session-id"]
    return headers | {"MCP-Session-Id": session, "MCP-Protocol-Version": LEGACY_VERSION}


async def verify(gateway: str, headers: dict[str, str], body: str, era: str) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(gateway, data=body.encode(), headers=headers) as response,
    ):
        raw = await response.read()
    answer = msgspec.json.decode(raw)
    result = answer.get("result") if isinstance(answer, dict) else None
    if (
        response.status != 200
        or not isinstance(result, dict)
        or result.get("isError") is not False
        or result.get("structuredContent") != EXPECTED
    ):
        raise RuntimeError(f"{era} tools/call is wrong: HTTP {response.status} {raw[:600]!r}")


def ms(value: float) -> str:
    return f"{value:.2f}"


def print_table(connections: int, seconds: float, rows: list[Row], idle: int) -> None:
    direct = rows[0].best.wrk
    rounds = len(rows[0].runs)
    best = f", best of {rounds} rounds" if rounds > 1 else ""
    print(f"\n{connections} connections, {seconds:g} s per run{best}")
    head = (
        f"{'':26}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'err':>5}{'non2xx':>7}"
        f"{'/direct':>9}{'p50 x':>7}{'p99 x':>7}{'xFastMCP':>9}{'up/call':>8}{'db/call':>9}"
        f"{'other%':>8}"
    )
    print(head)
    print("-" * len(head))
    for row in rows:
        run = row.best
        w = run.wrk
        ratios = (
            f"{w.rps / direct.rps:>9.2f}{w.p50_ms / direct.p50_ms:>7.1f}"
            f"{w.p99_ms / direct.p99_ms:>7.1f}{w.rps / FASTMCP_RPS:>9.1f}"
        )
        extra = (
            f"{row.upstream_per_call():>8.3f}{row.db_per_call(idle):>9.4f}"
            if row.gateway
            else f"{'':>17}"
        )
        errors = sum(r.wrk.socket_errors for r in row.runs)
        non_2xx = sum(r.wrk.non_2xx for r in row.runs)
        print(
            f"{row.label:26}{w.rps:>8.0f}{ms(w.p50_ms):>8}{ms(w.p99_ms):>8}"
            f"{errors:>5}{non_2xx:>7}{ratios}{extra}{run.other_cpu:>8.0f}"
        )
    for row in rows[1:]:
        rps = row.best.wrk.rps
        windows = ", ".join(str(r.db_window) for r in row.runs)
        print(
            f"  {row.label}: {rps / FASTMCP_RPS:.1f}x FastMCP's {FASTMCP_RPS:g}/s "
            f"(target >= {TARGET_FASTMCP_X:g}x); {rps / direct.rps:.2f} of direct measured "
            f"here, {rps / ISSUE_DIRECT_RPS:.2f} of the issue's {ISSUE_DIRECT_RPS:,.0f}/s "
            f"(target >= {TARGET_DIRECT_SHARE:.2f}); db transactions per window {windows} "
            f"(idle {idle}) over {row.calls()} calls"
        )


async def idle_window(server: str, name: str, seconds: float) -> int:
    before = db_transactions(server, name)
    await asyncio.sleep(seconds)
    return db_transactions(server, name) - before


async def main(args: argparse.Namespace) -> int:
    for tool, package in (("wrk", "wrk"), ("taskset", "util-linux")):
        if shutil.which(tool) is None:
            print(f"{tool} not found: apt install {package}", file=sys.stderr)
            return 2
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("needs two CPUs: one for the server under test, one for wrk", file=sys.stderr)
        return 2
    server_cpu, client_cpu = cpus[0], cpus[1]
    connection_counts = [int(c) for c in args.connections.split(",") if c.strip()]
    eras = [e.strip() for e in args.eras.split(",") if e.strip()]
    if not set(eras) <= {"legacy", "modern"} or not connection_counts or args.rounds < 1:
        print("--eras takes legacy and/or modern; --connections and --rounds >= 1", file=sys.stderr)
        return 2

    configure_logging("warning", json=False)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server = os.environ.get(
        "CRANK_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    name = f"crank_bench_call_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(server)
    params["dbname"] = name
    url = make_conninfo(**params)  # type: ignore[arg-type]
    workdir = Path(tempfile.mkdtemp(prefix="crank-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        direct_port, upstream_port, gateway_port = free_port(), free_port(), free_port()
        key = await seed(url, upstream_port)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
        env |= {"PYTHONPATH": str(ROOT)}
        gateway_env = env | {
            "CRANK_DATABASE_URL": url,
            "CRANK_SECRET_KEY": SECRET,
            "CRANK_METRICS_PORT": str(free_port()),
            "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream_port}",
            "CRANK_RATE_LIMIT": "off",
            "CRANK_LOG_LEVEL": args.log_level,
        }
        upstream_app = "bench.rates_upstream:app"
        logs = {n: workdir / f"{n}.log" for n in ("direct", "upstream", "gateway")}
        direct = serve(
            server_cpu, upstream_app, direct_port, env, factory=False, log=logs["direct"]
        )
        processes.append(direct)
        upstream = serve(
            client_cpu, upstream_app, upstream_port, env, factory=False, log=logs["upstream"]
        )
        processes.append(upstream)
        gateway_process = serve(
            server_cpu,
            "mcp_gateway.app:create_app",
            gateway_port,
            gateway_env,
            factory=True,
            log=logs["gateway"],
            loop=args.gateway_loop,
        )
        processes.append(gateway_process)
        await wait_up(f"http://127.0.0.1:{direct_port}/_count", direct, logs["direct"])
        await wait_up(f"http://127.0.0.1:{upstream_port}/_count", upstream, logs["upstream"])
        await wait_up(f"http://127.0.0.1:{gateway_port}/readyz", gateway_process, logs["gateway"])
        print(
            f"gateway: pid {gateway_process.pid} (granian, 1 worker, CPU {server_cpu}, "
            f"--loop {args.gateway_loop}), "
            f"CRANK_LOG_LEVEL={args.log_level}, CRANK_RATE_LIMIT=off; direct upstream on CPU "
            f"{server_cpu}; wrk -t1 and the gateway's upstream on CPU {client_cpu}",
            flush=True,
        )

        gateway = f"http://127.0.0.1:{gateway_port}{PATH}"
        direct_url = f"http://127.0.0.1:{direct_port}/v1/latest?base=USD&symbols=EUR"
        scripts = {"direct": write_lua(workdir, "direct", "GET", "", {})}
        for era in eras:
            headers = await era_headers(gateway, key, era)
            body = call_body(era == "modern")
            await verify(gateway, headers, body, era)
            scripts[era] = write_lua(workdir, era, "POST", body, headers)
        print("verified: one tools/call per era returns isError false and the expected result")

        for era in eras:  # warm the gateway's connection pool to the upstream
            run_wrk(client_cpu, gateway, scripts[era], max(connection_counts), WARMUP_S)
        run_wrk(client_cpu, direct_url, scripts["direct"], max(connection_counts), WARMUP_S)
        await asyncio.sleep(SETTLE_S)

        meter = CpuMeter([p.pid for p in processes])
        window = args.seconds + SETTLE_S
        idle_before = await idle_window(server, name, window)
        print(f"idle database window ({window:g} s): {idle_before} transactions", flush=True)

        labels = {
            "legacy": f"gateway legacy {LEGACY_VERSION}",
            "modern": f"gateway modern {MODERN_VERSION}",
        }
        tables = {
            c: [Row("direct GET upstream", gateway=False)]
            + [Row(labels[era], gateway=True) for era in eras]
            for c in connection_counts
        }
        for round_ in range(1, args.rounds + 1):
            for connections, rows in tables.items():
                started = meter.start()
                result = run_wrk(
                    client_cpu, direct_url, scripts["direct"], connections, args.seconds
                )
                rows[0].runs.append(Run(result, meter.other_percent(started)))
                progress = f"round {round_} c{connections:<3} {result.rps:6.0f} direct"
                for era, row in zip(eras, rows[1:], strict=True):
                    db_before = db_transactions(server, name)
                    up_before = await upstream_count(upstream_port)
                    started = meter.start()
                    result = run_wrk(client_cpu, gateway, scripts[era], connections, args.seconds)
                    other = meter.other_percent(started)
                    up_after = await upstream_count(upstream_port)
                    await asyncio.sleep(SETTLE_S)
                    db_window = db_transactions(server, name) - db_before
                    row.runs.append(Run(result, other, up_after - up_before, db_window))
                    progress += f" {result.rps:6.0f} {era}"
                print(progress + " req/s", flush=True)
        idle_after = await idle_window(server, name, window)
        # One-off background work (e.g. the first retention pass) can land in either idle
        # window; the quieter one is the steady background.
        idle = min(idle_before, idle_after)
        print(f"idle database window again: {idle_after} transactions; using {idle}")
        for connections, rows in tables.items():
            print_table(connections, args.seconds, rows, idle)
        if args.keep:
            print(
                f"--keep: servers stay up until Enter (gateway {gateway}, wrk scripts in "
                f"{workdir}); the database {name} and {workdir} are kept",
                flush=True,
            )
            await asyncio.to_thread(sys.stdin.readline)
        return 0
    finally:
        for process in reversed(processes):
            stop(process)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
            with psycopg.connect(server, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=10.0, help="per wrk run (default 10)")
    parser.add_argument("--connections", default="16,64", help='wrk -c values (default "16,64")')
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat every run; tables show the best"
    )
    parser.add_argument("--eras", default="legacy,modern", help="legacy and/or modern")
    parser.add_argument("--log-level", default="warning", help="CRANK_LOG_LEVEL of the gateway")
    parser.add_argument(
        "--gateway-loop",
        default="auto",
        choices=("auto", "asyncio", "uvloop"),
        help="granian --loop of the gateway (default auto: uvloop when installed); "
        "both upstreams always run asyncio, as in issue 4",
    )
    parser.add_argument(
        "--keep", action="store_true", help="leave servers up until Enter; keep logs and scripts"
    )
    sys.exit(asyncio.run(main(parser.parse_args())))
