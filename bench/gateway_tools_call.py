"""tools/call side by side: direct, a bare proxy, FastMCP and Crank's gateway, in one run.

    .venv/bin/python bench/gateway_tools_call.py [--seconds 10] [--connections 1,16,64]
        [--rounds 1] [--eras legacy,modern] [--no-fastmcp] [--log-level warning] [--keep]
        [--baseline-tree PATH] [--auth key|token|both]

Needs wrk (``apt install wrk``), taskset, two CPUs and a PostgreSQL
(``CRANK_BENCH_DATABASE_URL``, default the local server); it creates and drops
its own database and seeds it in process through the control-plane app.
FastMCP runs from its own venv (bench/fastmcp_venv.py; made on first use).
Every ratio it prints is against figures of the same run (the performance
targets are judged on nothing else; docs/performance.md).

Set-up. The upstream is bench/rates_upstream.py, a bare ASGI app under granian
(one worker) answering ``GET /v1/latest?base=..&symbols=..`` with
frankfurter-like JSON. Two copies run: one is the *direct* target, one is the
upstream of everything else (both ``--loop asyncio``). The rows:

- *direct*: wrk GETs the upstream itself, the ceiling;
- *floor*: bench/floor_app.py, a bare ASGI app under granian that fetches the
  upstream through Crank's ``UpstreamExecutor`` and returns its body: the
  server and the HTTP client alone, what no gateway in Python can beat here;
- *FastMCP*: FastMCP 4.2.3's ``from_openapi`` proxy, stateless, JSON answers,
  under uvicorn (bench/fastmcp_server.py), one row per era;
- *Crank*: ``mcp_gateway.app:create_app`` under granian with one worker,
  ``--loop`` from ``--gateway-loop``, ``CRANK_UPSTREAM_ALLOWLIST=127.0.0.1:<port>``,
  ``CRANK_RATE_LIMIT=off`` and ``CRANK_LOG_LEVEL`` from ``--log-level``.

Pinning (``taskset``). Every server under test is on the first CPU (only the one
under load is busy); wrk (one thread) and the shared upstream are on the second.
Load comes from wrk with a Lua script (the method, body and headers);
its ``done`` hook prints requests, errors and the latency percentiles.
One connection (``-c1``) gives the unloaded latency: Crank's overhead over a
direct call is its p50 and p99 minus direct's.

Protocol eras. *legacy*: ``2025-06-18`` with a session opened by initialize
before wrk starts, ``Accept: application/json`` (the seed's curl lines).
*modern*: ``2026-07-28``, stateless, ``Mcp-Method``/``Mcp-Name`` headers and
the ``params._meta`` envelope.

Correctness. Before measuring, one tools/call per server and era must return
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

Baseline (``--baseline-tree PATH``). To show a change does not cost
throughput, measure the commit before it in the same run: give a checkout of
it (``git worktree add /tmp/base <commit>``). A second gateway then runs from
that tree (its working directory and ``PYTHONPATH``, so its own
``mcp_gateway`` is imported; checked before start) with the same settings,
database and CPU, its own port and metrics port, and is verified like the
first. Its rows, "Crank <version> (baseline)", follow each Crank row and run
in the same rounds (on even rounds before the Crank row); ``up/call`` and
``db/call`` are counted alike. After the tables, Crank's req/s over the
baseline's (best run of each) per era and connection count. The baseline
uses this tree's venv and database schema (migrated by this tree's code), so
a commit with other dependencies or migrations may fail to start or verify.
Two gateways polling one database make the idle background larger (about
twice one gateway's): it is subtracted from every window alike, but its
jitter weighs more in short runs' db/call.

Tokens (``--auth token|both``). The workspace trusts bench/loopback_idp.py (an
issuer's OpenID metadata and JWKS served from a thread of the bench) and the
agent takes its tokens with scope ``rates:read``; each gateway runs with
``CRANK_PUBLIC_URL`` its own URL (the audience of its tokens) and
``CRANK_ALLOW_LOOPBACK_UPSTREAMS=true`` (the IdP's documents pass the SSRF
guard). Crank's rows are then per bearer, "Crank <version> token" sending an
RFC 9068 access token (RS256, an hour ahead, checked once and then remembered).
Every gateway row also shows ``cpu ms``: the CPU time of the gateway's
processes during its wrk runs over their calls, all rounds together (``/proc``
ticks, 10 ms each). After the tables, token over key per gateway, era and
connections: req/s and CPU per call, against issue 28's budget (a cached token
at most 5 % more CPU than a key). On a busy shared machine these ratios swung
by up to 20 % either way between runs; the figure to judge the budget by is
bench/callgrind_tools_call.py ``--auth both`` (docs/performance.md, "Token
calls").

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import psycopg

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script; imported, the importer's path stands
    sys.path.insert(0, str(ROOT))

from bench.harness import (  # noqa: E402
    SECRET,
    admin_api,
    create_database,
    drop_database,
    grant_loopback,
)
from bench.loopback_idp import PROVIDER, SCOPES, LoopbackIdp  # noqa: E402
from bench.rates_upstream import DATE, RATE  # noqa: E402
from shared.logging import configure_logging  # noqa: E402

PATH = "/mcp/v1/bench/rates"
TOOL = "latest_rate"
ARGUMENTS = {"base": "USD", "quote": "EUR"}
EXPECTED = {"base": "USD", "date": DATE, "rates": {"EUR": RATE}}
# The performance issue's targets, judged on figures of this run only.
TARGET_DIRECT_SHARE = 0.30  # gateway req/s over direct req/s, at 16 and 64 connections
TARGET_FASTMCP_X = {16: 12.0, 64: 15.0}  # gateway req/s over FastMCP's, same era
TARGET_TAIL_X = 3.0  # p99 over p50 at 16 connections
TARGET_OVERHEAD_MS = (0.3, 1.0)  # one connection: p50 and p99 over direct's
TOKEN_CPU_BUDGET = 1.05  # issue 28: a call with a cached token over one with a key, CPU
SETTLE_S = 11.0  # > PGSTAT_IDLE_INTERVAL (10 s): every backend has flushed its counters
WARMUP_S = 2.0
LEGACY_VERSION = "2025-06-18"
MODERN_VERSION = "2026-07-28"
ERA_VERSIONS = {"legacy": LEGACY_VERSION, "modern": MODERN_VERSION}
GATEWAYS = ("crank", "baseline")  # row kinds of Crank's gateways: this tree's and the baseline's

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
    gateway_cpu_s: float = 0.0  # CPU time of the gateway's processes during wrk (gateway rows)


@dataclass(slots=True)
class Row:
    """One line of a table: the best of its rounds, and the sums over all of them."""

    label: str
    kind: str  # "direct", "floor", "fastmcp", "crank" or "baseline"
    era: str = ""  # legacy or modern (MCP rows)
    auth: str = "key"  # the bearer of Crank's rows: an agent key or an access token
    runs: list[Run] = field(default_factory=list)

    @property
    def counted(self) -> bool:
        """Crank's rows (and the baseline's): upstream requests and database transactions
        are counted."""
        return self.kind in GATEWAYS

    @property
    def best(self) -> Run:
        return max(self.runs, key=lambda run: run.wrk.rps)

    def upstream_per_call(self) -> float:
        return sum(r.upstream_calls for r in self.runs) / self.calls()

    def db_per_call(self, idle: int) -> float:
        return sum(r.db_window - idle for r in self.runs) / self.calls()

    def calls(self) -> int:
        return max(1, sum(r.wrk.requests for r in self.runs))

    def cpu_ms_per_call(self) -> float:
        """The gateway's CPU time over its calls, all rounds together (a sum is steadier
        than one run on a shared machine)."""
        return 1000 * sum(r.gateway_cpu_s for r in self.runs) / self.calls()


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
        by_group = cpu_ticks_by_group()
        ticks = sum(by_group.get(group, 0) for group in self._groups)
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


def process_stats() -> Iterator[tuple[int, int, int]]:
    """(pid, process group, CPU ticks used: utime + stime) of every process, from /proc."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                fields = stat.read().rpartition(")")[2].split()
        except OSError:  # the process has gone
            continue
        yield int(entry), int(fields[2]), int(fields[11]) + int(fields[12])


def cpu_ticks_by_group() -> dict[int, int]:
    """CPU ticks used so far by the processes of each process group."""
    ticks: dict[int, int] = {}
    for _, group, used in process_stats():
        ticks[group] = ticks.get(group, 0) + used
    return ticks


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


def run_wrk(cpu: int | str, url: str, script: Path, connections: int, seconds: float) -> WrkResult:
    """wrk pinned with ``taskset -c cpu`` (a CPU, or a list such as \"0,1\")."""
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


async def seed(url: str, upstream_port: int, issuer: str | None = None) -> str:
    """The workspace ``bench`` with the operation and the agent ``rates``; its agent key.

    With ``issuer``, the workspace trusts that identity provider (bench/loopback_idp.py)
    and the agent takes its tokens too, with the provider's scopes required."""
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
    async with admin_api(url) as checked:
        await checked("POST", "/api/v1/workspaces", json={"slug": "bench"})
        base = "/api/v1/workspaces/bench"
        await grant_loopback(checked, "bench", upstream_port)  # the upstream is on loopback
        op = await checked("POST", f"{base}/operations", json=spec)
        await checked(
            "POST", f"{base}/operations/{TOOL}/publish", h={"If-Match": op.headers["etag"]}
        )
        agent_spec: dict[str, Any] = {"slug": "rates", "operations": [TOOL]}
        if issuer is not None:
            await checked(
                "POST",
                f"{base}/identity-providers",
                json={"name": PROVIDER, "issuer": issuer},
            )
            agent_spec["auth"] = {"providers": [PROVIDER], "scopes": list(SCOPES)}
        agent = await checked("POST", f"{base}/agents", json=agent_spec)
        await checked("POST", f"{base}/agents/rates/publish", h={"If-Match": agent.headers["etag"]})
        key = await checked("POST", f"{base}/keys", json={"agent": "rates"})
        return str(key.json()["key"])


def serve(
    cpu: int | str | None,
    target: str,
    port: int,
    env: dict[str, str],
    *,
    factory: bool,
    log: Path,
    loop: str = "asyncio",
    cwd: Path = ROOT,
) -> subprocess.Popen[bytes]:
    """granian serving ``target`` on ``port``, pinned with ``taskset -c cpu`` (None: unpinned).

    ``python -m`` puts ``cwd`` first on sys.path: it decides which checkout is imported.
    """
    pin = [] if cpu is None else ["taskset", "-c", str(cpu)]
    argv = [*pin, sys.executable, "-m", "granian", "--interface", "asgi"]
    argv += ["--no-ws", "--workers", "1", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--loop", loop]
    argv += ["--log-level", "warning", "--no-access-log"]
    if factory:
        argv.append("--factory")
    with log.open("wb") as out:
        # Own session: the whole group (granian's worker included) is signalled on cleanup.
        return subprocess.Popen(
            [*argv, target], env=env, cwd=cwd, stdout=out, stderr=out, start_new_session=True
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


def tree_commit(tree: Path) -> str:
    """The commit checked out in ``tree``, for the record ("-dirty" if changed; "?" if no git)."""
    out = subprocess.run(
        ["git", "-C", str(tree), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
    )
    return out.stdout.strip() or "?"


def check_imports_from(tree: Path, env: dict[str, str]) -> None:
    """A server started in ``tree`` with ``env`` imports ``mcp_gateway`` from ``tree``: the
    venv's editable install points at one checkout, which must not win."""
    out = subprocess.run(
        [sys.executable, "-c", "import mcp_gateway; print(mcp_gateway.__file__)"],
        env=env,
        cwd=tree,
        check=True,
        capture_output=True,
        text=True,
    )
    imported = Path(out.stdout.strip()).resolve()
    if not imported.is_relative_to(tree):
        raise RuntimeError(f"the baseline imports {imported}, not from {tree}")


def tail(log: Path) -> str:
    return log.read_text(errors="replace")[-3000:]


async def wait_up(
    url: str, process: subprocess.Popen[bytes], log: Path, timeout_s: float = 30.0
) -> None:
    deadline = time.monotonic() + timeout_s
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
    raise RuntimeError(f"{url} did not come up within {timeout_s:g} s:\n{tail(log)}")


async def upstream_count(port: int) -> int:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/_count") as response,
    ):
        return int(await response.text())


def db_transactions(server: str, name: str) -> int:
    """Transactions of database ``name`` so far (read from ``server``'s own database)."""
    return _database_figure(
        server, "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", name
    )


def db_connections(server: str, name: str) -> int:
    """Backends connected to database ``name`` now."""
    return _database_figure(
        server, "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", name
    )


def _database_figure(server: str, query: str, name: str) -> int:
    with psycopg.connect(server, autocommit=True) as conn:
        row = conn.execute(query.encode(), (name,)).fetchone()
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


def initialize_message(version: str = LEGACY_VERSION) -> bytes:
    message = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {
            "protocolVersion": version,
            "capabilities": {},
            "clientInfo": {"name": "bench", "version": "1"},
        },
    }
    return msgspec.json.encode(message)


async def verify_fastmcp(url: str, headers: dict[str, str], body: str, era: str) -> None:
    """One tools/call to FastMCP returns the upstream's rate (its whole body: no selection)."""
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=body.encode(), headers=headers) as response,
    ):
        raw = await response.read()
    result = msgspec.json.decode(raw).get("result")
    content = result.get("structuredContent") if isinstance(result, dict) else None
    if (
        response.status != 200
        or not isinstance(content, dict)
        or content.get("rates") != {"EUR": RATE}
    ):
        raise RuntimeError(
            f"FastMCP {era} tools/call is wrong: HTTP {response.status} {raw[:600]!r}"
        )


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
    async with (
        aiohttp.ClientSession() as http,
        http.post(gateway, data=initialize_message(), headers=headers) as response,
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
    fastmcp = {row.era: row.best.wrk for row in rows if row.kind == "fastmcp"}
    rounds = len(rows[0].runs)
    best = f", best of {rounds} rounds" if rounds > 1 else ""
    print(
        f"\n{connections} connection{'s' if connections > 1 else ''}, {seconds:g} s per run{best}"
    )
    head = (
        f"{'':34}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'p99/p50':>8}{'err':>5}{'non2xx':>7}"
        f"{'/direct':>9}{'xFastMCP':>9}{'up/call':>8}{'db/call':>9}{'other%':>8}{'cpu ms':>8}"
    )
    print(head)
    print("-" * len(head))
    for row in rows:
        run = row.best
        w = run.wrk
        peer = fastmcp.get(row.era) if row.kind in GATEWAYS else None
        versus = f"{w.rps / peer.rps:>9.1f}" if peer else f"{'':>9}"
        extra = (
            f"{row.upstream_per_call():>8.3f}{row.db_per_call(idle):>9.4f}"
            if row.counted
            else f"{'':>17}"
        )
        cpu = f"{row.cpu_ms_per_call():>8.3f}" if row.counted else ""
        errors = sum(r.wrk.socket_errors for r in row.runs)
        non_2xx = sum(r.wrk.non_2xx for r in row.runs)
        print(
            f"{row.label:34}{w.rps:>8.0f}{ms(w.p50_ms):>8}{ms(w.p99_ms):>8}"
            f"{w.p99_ms / w.p50_ms:>8.1f}{errors:>5}{non_2xx:>7}{w.rps / direct.rps:>9.2f}"
            f"{versus}{extra}{run.other_cpu:>8.0f}{cpu}"
        )
    for row in rows:
        if row.kind == "crank" and row.auth == "key":
            print("  " + verdict(connections, row, direct, fastmcp.get(row.era), idle))


def print_baseline_ratios(tables: dict[int, list[Row]], eras: list[str], record: str) -> None:
    """Crank's req/s over the baseline's, best run of each, per era and connection count."""
    print(f"\nCrank / baseline, req/s of the best run of each ({record}; below 1.00: slower)")
    for era in eras:
        ratios = []
        for connections, table in tables.items():
            rps = {
                row.kind: row.best.wrk.rps for row in table if row.era == era and row.auth == "key"
            }
            ratios.append(f"c{connections} {rps['crank'] / rps['baseline']:.3f}")
        print(f"  {era} {ERA_VERSIONS[era]}: " + "   ".join(ratios))


def print_token_ratios(tables: dict[int, list[Row]]) -> None:
    """Token rows over key rows of the same gateway, era and connections: req/s of the
    best run of each, and the gateway's CPU per call over all rounds (issue 28: at most
    5 % more CPU)."""
    print(
        "\ntoken / key, same gateway, era and connections (req/s: best run; CPU per call: "
        f"all rounds; issue 28: CPU per call at most {TOKEN_CPU_BUDGET:g} x)"
    )
    for connections, table in tables.items():
        keyed = {(r.kind, r.era): r for r in table if r.counted and r.auth == "key"}
        for row in table:
            if not row.counted or row.auth != "token":
                continue
            key = keyed[(row.kind, row.era)]
            rps, key_rps = row.best.wrk.rps, key.best.wrk.rps
            cpu, key_cpu = row.cpu_ms_per_call(), key.cpu_ms_per_call()
            print(
                f"  c{connections:<3} {row.label:38} req/s {rps:,.0f} / {key_rps:,.0f} = "
                f"{rps / key_rps:.3f}; CPU ms/call {cpu:.3f} / {key_cpu:.3f} = "
                f"{cpu / key_cpu:.3f} ({'met' if cpu / key_cpu <= TOKEN_CPU_BUDGET else 'MISSED'})"
            )


def verdict(
    connections: int, row: Row, direct: WrkResult, fastmcp: WrkResult | None, idle: int
) -> str:
    """The issue's targets for one Crank row, each with the figure it is judged on."""
    w = row.best.wrk
    checks: list[str] = []

    def check(name: str, value: float, ok: bool, goal: str) -> None:
        checks.append(f"{name} {value:.2f} ({'met' if ok else 'MISSED'}: {goal})")

    if connections == 1:
        p50, p99 = w.p50_ms - direct.p50_ms, w.p99_ms - direct.p99_ms
        check(
            "p50 over direct ms", p50, p50 <= TARGET_OVERHEAD_MS[0], f"<= {TARGET_OVERHEAD_MS[0]}"
        )
        check(
            "p99 over direct ms", p99, p99 <= TARGET_OVERHEAD_MS[1], f"<= {TARGET_OVERHEAD_MS[1]}"
        )
    else:
        share = w.rps / direct.rps
        check("x direct", share, share >= TARGET_DIRECT_SHARE, f">= {TARGET_DIRECT_SHARE}")
        goal = TARGET_FASTMCP_X.get(connections)
        if fastmcp is not None and goal is not None:
            times = w.rps / fastmcp.rps
            check("x FastMCP", times, times >= goal, f">= {goal:g}")
        if connections == 16:
            tail = w.p99_ms / w.p50_ms
            check("p99/p50", tail, tail <= TARGET_TAIL_X, f"<= {TARGET_TAIL_X:g}")
    errors = sum(r.wrk.socket_errors + r.wrk.non_2xx for r in row.runs)
    checks.append(f"errors {errors}")
    checks.append(f"db/call {row.db_per_call(idle):.4f}")
    return f"{row.label}: " + "; ".join(checks)


def run_order(table: list[Row], round_: int) -> list[int]:
    """Indexes of ``table`` in the order they run: on even rounds each baseline row runs
    before its Crank row, so neither gateway always goes second."""
    order = list(range(len(table)))
    if round_ % 2 == 0:
        for index, row in enumerate(table):
            if row.kind == "baseline":
                order[index - 1], order[index] = index, index - 1
    return order


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
    tree = args.baseline_tree.resolve() if args.baseline_tree else None
    if tree is not None and not (tree / "mcp_gateway" / "app.py").is_file():
        print(f"--baseline-tree {tree}: no mcp_gateway/app.py there", file=sys.stderr)
        return 2

    auths = ["key", "token"] if args.auth == "both" else [args.auth]

    configure_logging("warning", json=False)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server, name, url = create_database("call")
    workdir = Path(tempfile.mkdtemp(prefix="crank-bench-"))
    processes: list[subprocess.Popen[bytes]] = []
    # Token rows: an IdP on loopback (a thread of this process) the workspace trusts.
    idp = LoopbackIdp().__enter__() if "token" in auths else None
    # FastMCP's helpers import this module's; imported here, once it is complete.
    from bench.fastmcp_smoke import PATH as FASTMCP_PATH
    from bench.fastmcp_smoke import start_fastmcp, wait_fastmcp
    from bench.fastmcp_smoke import tools_call_request as fastmcp_request
    from bench.fastmcp_venv import ensure_fastmcp_venv

    try:
        names = ["direct", "upstream", "gateway", "floor", "fastmcp"]
        ports = {n: free_port() for n in names + (["baseline"] if tree else [])}
        upstream_port = ports["upstream"]
        key = await seed(url, upstream_port, idp.issuer if idp is not None else None)
        fastmcp_python = ensure_fastmcp_venv() if args.fastmcp else None
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
        if idp is not None:
            gateway_env |= {
                # The agent's canonical URL, the audience of its tokens, is the gateway's own.
                "CRANK_PUBLIC_URL": f"http://127.0.0.1:{ports['gateway']}",
                "CRANK_ALLOW_LOOPBACK_UPSTREAMS": "true",  # the IdP is on loopback too
            }
        upstream_url = f"http://127.0.0.1:{upstream_port}"
        upstream_app = "bench.rates_upstream:app"
        logs = {n: workdir / f"{n}.log" for n in ports}
        # The servers under test share the first CPU (only the one under load is busy);
        # wrk and the upstream of the gateway, the floor and FastMCP share the second.
        direct = serve(
            server_cpu, upstream_app, ports["direct"], env, factory=False, log=logs["direct"]
        )
        upstream = serve(
            client_cpu, upstream_app, upstream_port, env, factory=False, log=logs["upstream"]
        )
        floor = serve(
            server_cpu,
            "bench.floor_app:app",
            ports["floor"],
            env | {"CRANK_FLOOR_UPSTREAM": f"{upstream_url}/v1/latest?base=USD&symbols=EUR"},
            factory=False,
            log=logs["floor"],
            loop=args.gateway_loop,
        )
        gateway_process = serve(
            server_cpu,
            "mcp_gateway.app:create_app",
            ports["gateway"],
            gateway_env,
            factory=True,
            log=logs["gateway"],
            loop=args.gateway_loop,
        )
        processes += [direct, upstream, floor, gateway_process]
        if tree is not None:
            # All as the gateway's but the checkout it imports and the metrics port.
            baseline_env = gateway_env | {
                "PYTHONPATH": str(tree),
                "CRANK_METRICS_PORT": str(free_port()),
            }
            if idp is not None:
                baseline_env["CRANK_PUBLIC_URL"] = f"http://127.0.0.1:{ports['baseline']}"
            check_imports_from(tree, baseline_env)
            baseline_process = serve(
                server_cpu,
                "mcp_gateway.app:create_app",
                ports["baseline"],
                baseline_env,
                factory=True,
                log=logs["baseline"],
                loop=args.gateway_loop,
                cwd=tree,
            )
            processes.append(baseline_process)
        fastmcp_url = f"http://127.0.0.1:{ports['fastmcp']}{FASTMCP_PATH}"
        if fastmcp_python is not None:
            fastmcp = start_fastmcp(
                fastmcp_python, ports["fastmcp"], upstream_url, logs["fastmcp"], cpu=server_cpu
            )
            processes.append(fastmcp)
            await wait_fastmcp(fastmcp_url, fastmcp, logs["fastmcp"])
        await wait_up(f"http://127.0.0.1:{ports['direct']}/_count", direct, logs["direct"])
        await wait_up(f"{upstream_url}/_count", upstream, logs["upstream"])
        await wait_up(f"http://127.0.0.1:{ports['floor']}/", floor, logs["floor"])
        await wait_up(
            f"http://127.0.0.1:{ports['gateway']}/readyz", gateway_process, logs["gateway"]
        )
        record = ""
        if tree is not None:
            await wait_up(
                f"http://127.0.0.1:{ports['baseline']}/readyz", baseline_process, logs["baseline"]
            )
            record = f"{ROOT} at {tree_commit(ROOT)} over {tree} at {tree_commit(tree)}"
            print(f"baseline: a second gateway, same settings; {record}", flush=True)
        print(
            f"servers on CPU {server_cpu} (one granian worker each, gateway and floor "
            f"--loop {args.gateway_loop}; FastMCP under uvicorn), wrk -t1 and the shared "
            f"upstream on CPU {client_cpu}; CRANK_LOG_LEVEL={args.log_level}, "
            "CRANK_RATE_LIMIT=off",
            flush=True,
        )

        gateway = f"http://127.0.0.1:{ports['gateway']}{PATH}"
        direct_url = f"http://127.0.0.1:{ports['direct']}/v1/latest?base=USD&symbols=EUR"
        floor_url = f"http://127.0.0.1:{ports['floor']}/"
        rows = [Row("direct GET upstream", "direct"), Row("floor: granian + client", "floor")]
        targets = {0: (direct_url, write_lua(workdir, "direct", "GET", "", {}))}
        targets[1] = (floor_url, write_lua(workdir, "floor", "GET", "", {}))
        for era in eras:
            if fastmcp_python is not None:
                headers, body = fastmcp_request(era)
                await verify_fastmcp(fastmcp_url, headers, body, era)
                targets[len(rows)] = (
                    fastmcp_url,
                    write_lua(workdir, f"fastmcp-{era}", "POST", body, headers),
                )
                rows.append(Row(f"FastMCP {ERA_VERSIONS[era]}", "fastmcp", era))
        gateways = {"crank": gateway}
        if tree is not None:
            gateways["baseline"] = f"http://127.0.0.1:{ports['baseline']}{PATH}"
        suffix = {"crank": "", "baseline": " (baseline)"}
        pgids = {"crank": gateway_process.pid}  # own sessions: the pid is the group's id
        if tree is not None:
            pgids["baseline"] = baseline_process.pid
        for era in eras:  # each baseline row right after its Crank row
            for auth in auths:
                for kind, gateway_url in gateways.items():
                    # A token's audience is the agent's URL at that gateway (CRANK_PUBLIC_URL).
                    bearer = key if idp is None or auth == "key" else idp.token(gateway_url)
                    headers = await era_headers(gateway_url, bearer, era)
                    body = call_body(era == "modern")
                    tag = "" if auth == "key" else " token"
                    await verify(gateway_url, headers, body, era + tag + suffix[kind])
                    # Crank's key scripts keep their names (legacy.lua in the --keep line).
                    lua_name = "-".join(
                        [*(["baseline"] if kind == "baseline" else []), era]
                        + (["token"] if auth == "token" else [])
                    )
                    script = write_lua(workdir, lua_name, "POST", body, headers)
                    targets[len(rows)] = (gateway_url, script)
                    label = f"Crank {ERA_VERSIONS[era]}{tag}{suffix[kind]}"
                    rows.append(Row(label, kind, era, auth))
        print("verified: one tools/call per server and era returns the expected result")

        for target_url, script in targets.values():  # warm pools and caches
            run_wrk(client_cpu, target_url, script, max(connection_counts), WARMUP_S)
        await asyncio.sleep(SETTLE_S)

        meter = CpuMeter([p.pid for p in processes])
        window = args.seconds + SETTLE_S
        idle_before = await idle_window(server, name, window)
        print(f"idle database window ({window:g} s): {idle_before} transactions", flush=True)

        tables = {c: [Row(r.label, r.kind, r.era, r.auth) for r in rows] for c in connection_counts}
        for round_ in range(1, args.rounds + 1):
            for connections, table in tables.items():
                progress = f"round {round_} c{connections:<3}"
                for index in run_order(table, round_):
                    row = table[index]
                    target_url, script = targets[index]
                    db_before = db_transactions(server, name) if row.counted else 0
                    up_before = await upstream_count(upstream_port) if row.counted else 0
                    ticks = cpu_ticks_by_group().get(pgids.get(row.kind, -1), 0)
                    started = meter.start()
                    result = run_wrk(client_cpu, target_url, script, connections, args.seconds)
                    other = meter.other_percent(started)
                    if row.counted:
                        ticks = cpu_ticks_by_group().get(pgids[row.kind], 0) - ticks
                        cpu_s = ticks / os.sysconf("SC_CLK_TCK")
                        up_after = await upstream_count(upstream_port)
                        await asyncio.sleep(SETTLE_S)
                        db_window = db_transactions(server, name) - db_before
                        row.runs.append(Run(result, other, up_after - up_before, db_window, cpu_s))
                    else:
                        row.runs.append(Run(result, other))
                    progress += f" {result.rps:6.0f} {row.kind}"
                print(progress + " req/s", flush=True)
        idle_after = await idle_window(server, name, window)
        # One-off background work (e.g. the first retention pass) can land in either idle
        # window; the quieter one is the steady background.
        idle = min(idle_before, idle_after)
        print(f"idle database window again: {idle_after} transactions; using {idle}")
        for connections, table in tables.items():
            print_table(connections, args.seconds, table, idle)
        if tree is not None:
            print_baseline_ratios(tables, eras, record)
        if idp is not None:
            print_token_ratios(tables)
        if args.keep:
            shown = gateway + (f", baseline {gateways['baseline']}" if tree else "")
            print(
                f"--keep: servers stay up until Enter (gateway {shown}, wrk scripts in "
                f"{workdir}); the database {name} and {workdir} are kept",
                flush=True,
            )
            await asyncio.to_thread(sys.stdin.readline)
        return 0
    finally:
        for process in reversed(processes):
            stop(process)
        if idp is not None:
            idp.__exit__(None, None, None)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
            drop_database(server, name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=10.0, help="per wrk run (default 10)")
    parser.add_argument(
        "--connections", default="1,16,64", help='wrk -c values (default "1,16,64")'
    )
    parser.add_argument(
        "--no-fastmcp",
        dest="fastmcp",
        action="store_false",
        help="skip FastMCP (its venv is made on first use: about two minutes)",
    )
    parser.add_argument(
        "--rounds", type=int, default=1, help="repeat every run; tables show the best"
    )
    parser.add_argument("--eras", default="legacy,modern", help="legacy and/or modern")
    parser.add_argument(
        "--auth",
        choices=("key", "token", "both"),
        default="key",
        help="bearer of Crank's rows: the agent key (default), an access token of a loopback "
        "IdP, or both: rows of each, and token / key req/s and gateway CPU per call",
    )
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
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        metavar="PATH",
        help="also run a gateway from this checkout (e.g. git worktree add /tmp/base <commit>), "
        "rows next to Crank's, and print Crank / baseline",
    )
    sys.exit(asyncio.run(main(parser.parse_args())))
