"""The gateway with a large catalog: start-up, memory, and serving while the catalog changes.

    .venv/bin/python bench/catalog_scale.py [--workspaces 10] [--agents 10] [--tools 100]
        [--seconds 10] [--connections 16] [--changes 20] [--publishes 20] [--poll-ms 1000]

Issue targets 6 and 7. Needs wrk, taskset, two CPUs and a PostgreSQL
(``CRANK_BENCH_DATABASE_URL``, default the local server); it creates and drops
its own database.

Seed (bench/catalog_seed.py): ``--workspaces`` x ``--agents`` agents, each
bound to its own ``--tools`` operations (10,000 by default), one key each.
Operations are inserted in one transaction; agents, their publishes and keys
go through the admin API in process.

Two gateway replicas (``mcp_gateway.app:create_app`` under granian, one
worker each, ``--loop asyncio``): A pinned to the first CPU, B and wrk to the
second. The bench prints, per replica, the time from spawn to ``/readyz``
200, the worker's RSS after start-up and the full build time
(``crank_snapshot_build_seconds{kind="full"}``). Then, on replica A:

- tools/list of one agent (100 tools, legacy era, a session), wrk with
  ``--connections`` for ``--seconds``: the baseline with no change;
- the same load while ``--changes`` keys are created and ``--changes``
  operations published (a new draft, then publish) through the admin API,
  spread over the run; the p50/p99 ratios to the baseline are what to read;
- a control, after the publish -> visible runs below: replica A restarted
  with no LISTEN and a poll ten minutes away, and the same changes and load
  again. A does not reload, but the admin API, Postgres and replica B work
  as before: on a machine with two CPUs that contention alone slows A, and
  the difference between this row and the one before is A's reloading.

Then publish → visible: ``--publishes`` operations, one at a time, each a new
version with a marker in its description; the clock starts when the admin
API's publish answer arrives and stops, per replica, at the first tools/list
of the bound agent that shows the marker (asked every 2 ms). Once with
LISTEN (the default) and once with the replicas restarted with
``CRANK_MCP_LISTEN=false`` and ``CRANK_MCP_REFRESH_MS=--poll-ms``.

``--py-spy PATH`` records replica A's worker with py-spy (collapsed stacks,
``--py-spy-out``) during the run with changes.

Numbers are provisional on a shared machine: compare with the baseline measured
in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import logging
import os
import random
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
from litestar.testing import AsyncTestClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.catalog_seed import Seeded, seed  # noqa: E402
from bench.gateway_tools_call import (  # noqa: E402
    WrkResult,
    free_port,
    run_wrk,
    serve,
    stop,
    tail,
    write_lua,
)
from bench.harness import SECRET, create_database, drop_database  # noqa: E402
from control_plane.app import create_app  # noqa: E402
from shared.logging import configure_logging  # noqa: E402
from shared.settings import Settings  # noqa: E402

LEGACY_VERSION = "2025-06-18"
TOOLS_LIST = '{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{}}'
VISIBLE_POLL_S = 0.002
VISIBLE_TIMEOUT_S = 30.0
READY_TIMEOUT_S = 300.0
DEFAULT_REFRESH_S = 5.0  # CRANK_MCP_REFRESH_MS's default, the poll behind LISTEN


@dataclass(slots=True)
class Replica:
    name: str
    cpu: int
    port: int
    metrics_port: int
    log: Path
    process: subprocess.Popen[bytes] | None = None
    ready_s: float = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def worker_rss_mb(pid: int) -> float:
    """RSS of granian's worker: the child of the main process (its own RSS if none)."""
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    target = int(children[0]) if children else pid
    for line in Path(f"/proc/{target}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


async def metric(http: aiohttp.ClientSession, replica: Replica, name: str) -> float:
    async with http.get(f"http://127.0.0.1:{replica.metrics_port}/metrics") as response:
        text = await response.text()
    found = re.search(rf"^{re.escape(name)} ([0-9.e+-]+)$", text, re.MULTILINE)
    return float(found.group(1)) if found else float("nan")


async def wait_ready(replica: Replica) -> None:
    """Until /readyz answers 200: the first build of a large catalog on a busy machine
    can take longer than the other benches wait."""
    assert replica.process is not None
    deadline = time.monotonic() + READY_TIMEOUT_S
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if replica.process.poll() is not None:
                raise RuntimeError(f"replica {replica.name} exited:\n{tail(replica.log)}")
            try:
                async with http.get(f"{replica.url}/readyz") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.05)
    raise RuntimeError(f"replica {replica.name} not ready:\n{tail(replica.log)}")


async def start(replica: Replica, env: dict[str, str]) -> None:
    started = time.monotonic()
    replica.process = serve(
        replica.cpu,
        "mcp_gateway.app:create_app",
        replica.port,
        env | {"CRANK_METRICS_PORT": str(replica.metrics_port)},
        factory=True,
        log=replica.log,
    )
    await wait_ready(replica)
    replica.ready_s = time.monotonic() - started


class Sessions:
    """Legacy sessions of tools/list callers, one per (replica, agent), opened on first use."""

    def __init__(self, http: aiohttp.ClientSession, seeded: Seeded) -> None:
        self._http = http
        self._seeded = seeded
        self._open: dict[tuple[str, tuple[str, str]], dict[str, str]] = {}

    async def headers(self, replica: Replica, agent: tuple[str, str]) -> dict[str, str]:
        found = self._open.get((replica.name, agent))
        if found is not None:
            return found
        base = {
            "Authorization": f"Bearer {self._seeded.keys[agent]}",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        init = (
            '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"'
            + LEGACY_VERSION
            + '","capabilities":{},"clientInfo":{"name":"bench","version":"1"}}}'
        )
        async with self._http.post(path_url(replica, agent), data=init, headers=base) as response:
            assert response.status == 200, await response.text()
            session = response.headers["mcp-session-id"]
        made = base | {"MCP-Session-Id": session, "MCP-Protocol-Version": LEGACY_VERSION}
        self._open[(replica.name, agent)] = made
        return made


def path_url(replica: Replica, agent: tuple[str, str]) -> str:
    return f"{replica.url}/mcp/v1/{agent[0]}/{agent[1]}"


class Admin:
    """The changes, through the admin API of the control-plane app in this process."""

    def __init__(self, client: Any, seeded: Seeded) -> None:
        self._client = client
        self._h = {"Authorization": f"Bearer {seeded.admin}"}
        self._versions = itertools.count(2)

    async def _checked(self, method: str, path: str, **kwargs: Any) -> Any:
        headers = self._h | kwargs.pop("h", {})
        response = await self._client.request(method, path, headers=headers, **kwargs)
        if response.status_code >= 300:
            raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
        return response

    async def create_key(self, agent: tuple[str, str]) -> None:
        await self._checked("POST", f"/api/v1/workspaces/{agent[0]}/keys", json={"agent": agent[1]})

    async def publish(self, workspace: str, operation: str) -> str:
        """A new version of ``operation`` whose description carries a fresh marker."""
        marker = f"marker-{next(self._versions)}-{time.monotonic_ns()}"
        path = f"/api/v1/workspaces/{workspace}/operations/{operation}"
        current = await self._checked("GET", path)
        draft = current.json()["draft"]
        draft["description"] = draft["description"].split(" [", 1)[0] + f" [{marker}]"
        put = await self._checked("PUT", path, json=draft, h={"If-Match": current.headers["etag"]})
        await self._checked("POST", f"{path}/publish", h={"If-Match": put.headers["etag"]})
        return marker


async def visible_after(
    http: aiohttp.ClientSession,
    sessions: Sessions,
    replica: Replica,
    agent: tuple[str, str],
    marker: str,
    since: float,
) -> float:
    headers = await sessions.headers(replica, agent)
    needle = marker.encode()
    deadline = since + VISIBLE_TIMEOUT_S
    while time.monotonic() < deadline:
        async with http.post(path_url(replica, agent), data=TOOLS_LIST, headers=headers) as r:
            if needle in await r.read():
                return time.monotonic() - since
        await asyncio.sleep(VISIBLE_POLL_S)
    raise RuntimeError(f"{marker} not visible on {replica.name} after {VISIBLE_TIMEOUT_S} s")


async def publish_to_visible(
    admin: Admin,
    http: aiohttp.ClientSession,
    sessions: Sessions,
    replicas: list[Replica],
    seeded: Seeded,
    count: int,
    poll_s: float,
) -> dict[str, list[float]]:
    agents = list(seeded.operations)
    times: dict[str, list[float]] = {r.name: [] for r in replicas}
    phases = random.Random(7)  # noqa: S311 - spreads bench timings, nothing secret
    for i in range(count):
        # A publish right after the poll that showed the last one would always wait a
        # whole interval: start each at a random point of the poll's cycle.
        await asyncio.sleep(phases.uniform(0, poll_s))
        agent = agents[(i * 37) % len(agents)]
        operation = seeded.operations[agent][(i * 13) % len(seeded.operations[agent])]
        for replica in replicas:  # sessions open before the clock starts
            await sessions.headers(replica, agent)
        marker = await admin.publish(agent[0], operation)
        since = time.monotonic()
        found = await asyncio.gather(
            *(visible_after(http, sessions, r, agent, marker, since) for r in replicas)
        )
        for replica, seconds in zip(replicas, found, strict=True):
            times[replica.name].append(seconds)
    return times


async def changes_during(
    admin: Admin, seeded: Seeded, seconds: float, count: int
) -> tuple[int, int]:
    """``count`` keys and ``count`` publishes, spread over ``seconds``."""
    agents = list(seeded.operations)
    gap = seconds / (2 * count + 1)
    keys = publishes = 0
    for i in range(count):
        await asyncio.sleep(gap)
        await admin.create_key(agents[(i * 7) % len(agents)])
        keys += 1
        await asyncio.sleep(gap)
        agent = agents[(i * 11 + 3) % len(agents)]
        bound = seeded.operations[agent]
        await admin.publish(agent[0], bound[(i * 17) % len(bound)])
        publishes += 1
    return keys, publishes


def quantiles(values: list[float]) -> tuple[float, float]:
    """p50 and p99 in ms."""
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000


def print_table(
    args: argparse.Namespace,
    replicas: list[Replica],
    facts: dict[str, dict[str, float]],
    runs: dict[str, WrkResult],
    listen: dict[str, list[float]],
    polling: dict[str, list[float]],
) -> None:
    tools = args.workspaces * args.agents * args.tools
    print(
        f"\n{tools:,} operations in {args.workspaces * args.agents} agents, "
        f"{args.workspaces} workspaces; two replicas, granian 1 worker each"
    )
    head = f"{'':50}" + "".join(f"{r.name:>16}" for r in replicas)
    print(head)
    print("-" * len(head))

    def row(label: str, cells: list[str]) -> None:
        print(f"{label:50}" + "".join(f"{c:>16}" for c in cells))

    row("time to ready (s)", [f"{r.ready_s:.2f}" for r in replicas])
    row("worker RSS after start (MB)", [f"{facts[r.name]['rss']:.0f}" for r in replicas])
    row("full build (s)", [f"{facts[r.name]['full']:.2f}" for r in replicas])
    row("worker RSS at the end (MB)", [f"{facts[r.name]['rss_end']:.0f}" for r in replicas])
    row(
        "last incremental build (ms)",
        [f"{facts[r.name]['incremental'] * 1000:.1f}" for r in replicas],
    )
    for label, times in (("LISTEN", listen), (f"polling {args.poll_ms} ms", polling)):
        cells = []
        for r in replicas:
            p50, p99 = quantiles(times[r.name])
            cells.append(f"{p50:.0f} / {p99:.0f}")
        row(f"publish -> visible p50 / p99 (ms), {label}", cells)
    print(
        f"\ntools/list on replica A, {args.connections} connections, {args.seconds:g} s each "
        f"(wrk on the second CPU)"
    )
    head = f"{'':34}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'err':>6}{'p50 x':>8}{'p99 x':>8}"
    print(head)
    print("-" * len(head))
    baseline = next(iter(runs.values()))
    for label, w in runs.items():
        print(
            f"{label:34}{w.rps:>9.0f}{w.p50_ms:>9.2f}{w.p99_ms:>9.2f}"
            f"{w.socket_errors + w.non_2xx:>6}{w.p50_ms / baseline.p50_ms:>8.2f}"
            f"{w.p99_ms / baseline.p99_ms:>8.2f}"
        )


def profile(args: argparse.Namespace, replica: Replica) -> subprocess.Popen[bytes] | None:
    """py-spy on replica A's worker for the run with changes, when asked (--py-spy)."""
    if not args.py_spy:
        return None
    assert replica.process is not None
    children = Path(f"/proc/{replica.process.pid}/task/{replica.process.pid}/children")
    worker = children.read_text().split()[0]
    argv = [args.py_spy, "record", "--pid", worker, "--format", "raw", "--rate", "250"]
    argv += ["--duration", str(round(args.seconds)), "--output", args.py_spy_out, "--nonblocking"]
    return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


async def replica_facts(http: aiohttp.ClientSession, replica: Replica) -> dict[str, float]:
    assert replica.process is not None
    return {
        "rss": worker_rss_mb(replica.process.pid),
        "full": await metric(http, replica, 'crank_snapshot_build_seconds{kind="full"}'),
    }


async def main(args: argparse.Namespace) -> int:
    for tool, package in (("wrk", "wrk"), ("taskset", "util-linux")):
        if shutil.which(tool) is None:
            print(f"{tool} not found: apt install {package}", file=sys.stderr)
            return 2
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("needs two CPUs", file=sys.stderr)
        return 2
    # The admin API runs in this process: off replica A's CPU, with wrk and replica B.
    os.sched_setaffinity(0, {cpus[1]})
    configure_logging("warning", json=False)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server, name, url = create_database("catalog")
    workdir = Path(tempfile.mkdtemp(prefix="crank-bench-catalog-"))
    replicas = [
        Replica("A", cpus[0], free_port(), free_port(), workdir / "a.log"),
        Replica("B", cpus[1], free_port(), free_port(), workdir / "b.log"),
    ]
    try:
        started = time.monotonic()
        seeded = await seed(url, args.workspaces, args.agents, args.tools)
        print(f"seeded in {time.monotonic() - started:.1f} s", flush=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
        env |= {
            "PYTHONPATH": str(ROOT),
            "CRANK_DATABASE_URL": url,
            "CRANK_SECRET_KEY": SECRET,
            "CRANK_RATE_LIMIT": "off",
            "CRANK_LOG_LEVEL": "warning",
        }
        for replica in replicas:  # one after the other: each start has its CPU to itself
            await start(replica, env)
        app = create_app(Settings(database_url=url, secret_key=SECRET))
        connector = aiohttp.TCPConnector(limit=0)
        async with (
            AsyncTestClient(app=app) as client,
            aiohttp.ClientSession(connector=connector) as http,
        ):
            facts = {r.name: await replica_facts(http, r) for r in replicas}
            admin = Admin(client, seeded)
            sessions = Sessions(http, seeded)
            loaded_agent = next(iter(seeded.operations))
            headers = await sessions.headers(replicas[0], loaded_agent)
            script = write_lua(workdir, "tools_list", "POST", TOOLS_LIST, headers)
            target = path_url(replicas[0], loaded_agent)
            wrk_cpu = replicas[1].cpu
            await asyncio.to_thread(run_wrk, wrk_cpu, target, script, args.connections, 2.0)
            baseline = await asyncio.to_thread(
                run_wrk, wrk_cpu, target, script, args.connections, args.seconds
            )
            load = asyncio.create_task(
                asyncio.to_thread(run_wrk, wrk_cpu, target, script, args.connections, args.seconds)
            )
            profiler = profile(args, replicas[0])
            changed = await changes_during(admin, seeded, args.seconds, args.changes)
            loaded = await load
            if profiler is not None:
                profiler.wait(timeout=60)
                print(f"py-spy: collapsed stacks of replica A under changes in {args.py_spy_out}")
            listen = await publish_to_visible(
                admin, http, sessions, replicas, seeded, args.publishes, DEFAULT_REFRESH_S
            )
            for replica in replicas:
                facts[replica.name]["rss_end"] = worker_rss_mb(replica.process.pid)  # type: ignore[union-attr]
                facts[replica.name]["incremental"] = await metric(
                    http, replica, 'crank_snapshot_build_seconds{kind="incremental"}'
                )
            # Control: the same changes while replica A does not reload (no LISTEN, a
            # poll 10 minutes away). What is left is the machine's contention: the
            # admin API, Postgres and replica B; the difference is A's reloads.
            a = replicas[0]
            assert a.process is not None
            stop(a.process)
            await start(a, env | {"CRANK_MCP_LISTEN": "false", "CRANK_MCP_REFRESH_MS": "600000"})
            await asyncio.to_thread(run_wrk, wrk_cpu, target, script, args.connections, 2.0)
            load = asyncio.create_task(
                asyncio.to_thread(run_wrk, wrk_cpu, target, script, args.connections, args.seconds)
            )
            await changes_during(admin, seeded, args.seconds, args.changes)
            control = await load
            for replica in replicas:
                assert replica.process is not None
                stop(replica.process)
            polling_env = env | {
                "CRANK_MCP_LISTEN": "false",
                "CRANK_MCP_REFRESH_MS": str(args.poll_ms),
            }
            for replica in replicas:
                await start(replica, polling_env)
            polling = await publish_to_visible(
                admin,
                http,
                Sessions(http, seeded),
                replicas,
                seeded,
                args.publishes,
                args.poll_ms / 1000,
            )
        runs = {
            "no change (baseline)": baseline,
            f"{changed[0]} keys + {changed[1]} publishes": loaded,
            "the same, A not reloading (control)": control,
        }
        print_table(args, replicas, facts, runs, listen, polling)
    finally:
        for replica in replicas:
            if replica.process is not None:
                stop(replica.process)
        drop_database(server, name)
        shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--workspaces", type=int, default=10)
    parser.add_argument("--agents", type=int, default=10, help="per workspace")
    parser.add_argument("--tools", type=int, default=100, help="per agent")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--connections", type=int, default=4)
    parser.add_argument("--changes", type=int, default=20, help="keys, and publishes, under load")
    parser.add_argument("--publishes", type=int, default=20, help="publish -> visible samples")
    parser.add_argument("--py-spy", default="", help="py-spy executable: profile replica A")
    parser.add_argument("--py-spy-out", default="catalog_scale.pyspy.txt")
    parser.add_argument("--poll-ms", type=int, default=1000, help="CRANK_MCP_REFRESH_MS, no LISTEN")
    sys.exit(asyncio.run(main(parser.parse_args())))
