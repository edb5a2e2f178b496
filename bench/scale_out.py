"""tools/call throughput of 1, 2, 3 and 4 gateway processes behind one round-robin proxy.

    .venv/bin/python bench/scale_out.py [--replicas 1,2,3,4] [--seconds 10]
        [--connections 24] [--era modern|legacy] [--log-level warning]

Needs wrk (``apt install wrk``) and a PostgreSQL (``CRANK_BENCH_DATABASE_URL``,
default the local server); it creates and drops its own database and seeds it
like bench/gateway_tools_call.py (agent ``rates``, tool ``latest_rate``,
upstream bench/rates_upstream.py under granian).

It starts as many gateway processes as the largest ``--replicas`` (each
``mcp_gateway.app:create_app`` under granian, one worker, on one database:
replicas as a deployment runs them) and bench/round_robin_proxy.py in front
of the first *n* of them for each row. Rows:

- *proxy → upstream*: wrk through the proxy straight to the upstream, no
  gateway: what the proxy and the upstream alone can carry here, the
  ceiling of every row below;
- *1 gateway, no proxy*: wrk straight to one gateway: what the proxy costs;
- *n behind the proxy*, for each ``--replicas``.

Nothing is pinned: the point is what the processes do when they share the
machine's CPUs, as replicas on one node would. Each row prints req/s, p50,
p99, wrk's errors, the database's transactions per second over the run
(``pg_stat_database``; the replicas' background loops and the call log's
COPY, no round trip per plain call), and where the CPU went, in % of one CPU:
wrk, the proxy, the gateways together, the upstream, and everything else
(PostgreSQL and any other work on the machine). Throughput stops growing
when the CPUs are spent: the sum of the columns reaches the number of CPUs
times 100. Before the runs one tools/call through every gateway must return the
expected result. docs/scaling.md explains a run.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gateway_tools_call import (  # noqa: E402
    PATH,
    WARMUP_S,
    WrkResult,
    call_body,
    cpu_ticks_by_group,
    db_connections,
    db_transactions,
    era_headers,
    free_port,
    process_stats,
    run_wrk,
    seed,
    serve,
    stop,
    tail,
    verify,
    wait_up,
    write_lua,
)
from bench.harness import SECRET, create_database, drop_database  # noqa: E402
from shared.logging import configure_logging  # noqa: E402

GROUPS = ("wrk", "proxy", "gateways", "upstream")


@dataclass(frozen=True, slots=True)
class Row:
    label: str
    wrk: WrkResult
    cpu: dict[str, float]  # % of one CPU by group, and "other"
    db_per_s: float
    db_connections: int  # the bench database's backends at the end of the run


class CpuSplit:
    """CPU seconds by process group (/proc/<pid>/stat), wrk's (a waited child) and the
    machine's total (/proc/stat), between ``start`` and ``split``."""

    def __init__(self, groups: dict[str, list[int]]) -> None:
        self._groups = groups  # name -> process group ids
        self._tick = os.sysconf("SC_CLK_TCK")

    def _sample(self) -> dict[str, float]:
        by_pgrp = cpu_ticks_by_group()
        sample = {
            name: sum(by_pgrp.get(g, 0.0) for g in groups) / self._tick
            for name, groups in self._groups.items()
        }
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        sample["wrk"] = children.ru_utime + children.ru_stime
        with open("/proc/stat") as stat:
            sample["total"] = sum(int(v) for v in stat.readline().split()[1:4]) / self._tick
        return sample

    def start(self) -> tuple[float, dict[str, float]]:
        return time.monotonic(), self._sample()

    def split(self, started: tuple[float, dict[str, float]]) -> dict[str, float]:
        t0, before = started
        elapsed = time.monotonic() - t0
        after = self._sample()
        used = {name: after[name] - before[name] for name in after}
        shares = {name: 100 * used[name] / elapsed for name in GROUPS}
        shares["other"] = max(0.0, 100 * (used["total"] - sum(used[n] for n in GROUPS)) / elapsed)
        return shares


def measure(
    label: str,
    url: str,
    script: Path,
    args: argparse.Namespace,
    meter: CpuSplit,
    database: tuple[str, str],
) -> Row:
    run_wrk_unpinned(url, script, args.connections, WARMUP_S)
    xacts = db_transactions(*database)
    started = meter.start()
    result = run_wrk_unpinned(url, script, args.connections, args.seconds)
    cpu = meter.split(started)
    db_per_s = (db_transactions(*database) - xacts) / result.seconds
    row = Row(label, result, cpu, db_per_s, db_connections(*database))
    print_row(row)
    return row


def run_wrk_unpinned(url: str, script: Path, connections: int, seconds: float) -> WrkResult:
    every_cpu = ",".join(str(cpu) for cpu in sorted(os.sched_getaffinity(0)))
    return run_wrk(every_cpu, url, script, connections, seconds)


def worker_rss_mb(group: int) -> float:
    """The largest resident set of the processes in ``group`` (granian's worker)."""
    largest = 0
    for pid, pgrp, _ in process_stats():
        if pgrp != group:
            continue
        try:
            with open(f"/proc/{pid}/status") as status:
                rss = [line for line in status if line.startswith("VmRSS:")]
        except OSError:  # the process has gone
            continue
        if rss:
            largest = max(largest, int(rss[0].split()[1]))
    return largest / 1024


HEAD = (
    f"{'':26}{'req/s':>8}{'p50 ms':>8}{'p99 ms':>8}{'err':>5}{'db xact/s':>10}{'db conns':>9}"
    + "".join(f"{name + '%':>10}" for name in (*GROUPS, "other"))
)


def print_row(row: Row) -> None:
    w = row.wrk
    errors = w.socket_errors + w.non_2xx
    print(
        f"{row.label:26}{w.rps:>8.0f}{w.p50_ms:>8.2f}{w.p99_ms:>8.2f}{errors:>5}"
        f"{row.db_per_s:>10.1f}{row.db_connections:>9}"
        + "".join(f"{row.cpu[n]:>10.0f}" for n in (*GROUPS, "other")),
        flush=True,
    )


async def main(args: argparse.Namespace) -> int:
    if shutil.which("wrk") is None:
        print("wrk not found: apt install wrk", file=sys.stderr)
        return 2
    counts = sorted({int(n) for n in args.replicas.split(",") if n.strip()})
    if not counts or counts[0] < 1:
        print("--replicas takes counts of 1 or more, e.g. 1,2,3,4", file=sys.stderr)
        return 2
    configure_logging("warning", json=False)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server, name, url = create_database("scale")
    workdir = Path(tempfile.mkdtemp(prefix="crank-scale-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        upstream_port = free_port()
        key = await seed(url, upstream_port)
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
        env |= {"PYTHONPATH": str(ROOT)}
        upstream = serve(
            None,
            "bench.rates_upstream:app",
            upstream_port,
            env,
            factory=False,
            log=workdir / "upstream.log",
        )
        processes.append(upstream)
        await wait_up(
            f"http://127.0.0.1:{upstream_port}/_count", upstream, workdir / "upstream.log"
        )
        gateways: list[tuple[subprocess.Popen[bytes], int]] = []
        for index in range(counts[-1]):
            port = free_port()
            gateway_env = env | {
                "CRANK_DATABASE_URL": url,
                "CRANK_SECRET_KEY": SECRET,
                "CRANK_METRICS_PORT": str(free_port()),
                "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream_port}",
                "CRANK_RATE_LIMIT": "off",
                "CRANK_LOG_LEVEL": args.log_level,
            }
            log = workdir / f"gateway-{index}.log"
            process = serve(
                None, "mcp_gateway.app:create_app", port, gateway_env, factory=True, log=log
            )
            processes.append(process)
            gateways.append((process, port))
        for index, (process, port) in enumerate(gateways):
            await wait_up(
                f"http://127.0.0.1:{port}/readyz", process, workdir / f"gateway-{index}.log"
            )

        first = f"http://127.0.0.1:{gateways[0][1]}{PATH}"
        headers = await era_headers(first, key, args.era)  # a session is valid on every replica
        body = call_body(args.era == "modern")
        for _, port in gateways:
            await verify(f"http://127.0.0.1:{port}{PATH}", headers, body, args.era)
        print(f"verified: one {args.era} tools/call through each of {len(gateways)} gateways")
        script = write_lua(workdir, args.era, "POST", body, headers)
        plain_get = write_lua(workdir, "get", "GET", "", {})

        groups = {
            "proxy": [],
            "gateways": [p.pid for p, _ in gateways],
            "upstream": [upstream.pid],
        }
        meter = CpuSplit(groups)
        database = (server, name)
        cpus = len(os.sched_getaffinity(0))
        print(
            f"\n{cpus} CPUs, nothing pinned; wrk -t1 -c{args.connections}, {args.seconds:g} s "
            f"per row, {args.era} era; % columns are % of one CPU (the machine has "
            f"{cpus * 100}%); load average before: {os.getloadavg()[0]:.1f}"
        )
        print(HEAD)
        print("-" * len(HEAD))

        async def behind_proxy(label: str, backends: list[int], path: str, lua: Path) -> Row:
            proxy_port = free_port()
            log = workdir / f"proxy-{label}.log"
            proxy = start_proxy(proxy_port, backends, env, log)
            groups["proxy"] = [proxy.pid]
            try:
                await wait_listening(proxy_port, proxy, log)
                return measure(
                    label, f"http://127.0.0.1:{proxy_port}{path}", lua, args, meter, database
                )
            finally:
                stop(proxy)
                groups["proxy"] = []

        rows = [
            await behind_proxy(
                "proxy -> upstream", [upstream_port], "/v1/latest?base=USD&symbols=EUR", plain_get
            ),
            measure("1 gateway, no proxy", first, script, args, meter, database),
        ]
        for n in counts:
            ports = [port for _, port in gateways[:n]]
            rows.append(await behind_proxy(f"{n} behind the proxy", ports, PATH, script))
        rss = ", ".join(f"{worker_rss_mb(process.pid):.0f}" for process, _ in gateways)
        print(f"\ngateway worker RSS after the runs (MB): {rss}")
        behind = [row for row in rows if row.label.endswith("behind the proxy")]
        if len(behind) > 1:
            base = behind[0].wrk.rps
            growth = ", ".join(
                f"{row.label.split()[0]}: {row.wrk.rps / base:.2f}" for row in behind
            )
            print(f"throughput over 1 behind the proxy: {growth}")
        return 0
    finally:
        for process in reversed(processes):
            stop(process)
        shutil.rmtree(workdir, ignore_errors=True)
        drop_database(server, name)


def start_proxy(
    port: int, backends: list[int], env: dict[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """bench/round_robin_proxy.py on ``port`` in front of the loopback ``backends``."""
    argv = [sys.executable, str(ROOT / "bench" / "round_robin_proxy.py"), "--port", str(port)]
    argv += [f"127.0.0.1:{backend}" for backend in backends]
    with log.open("wb") as out:  # its own group, like the servers: signalled by stop()
        return subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=out, stderr=out, start_new_session=True
        )


async def wait_listening(port: int, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"proxy exited:\n{tail(log)}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            await asyncio.sleep(0.05)
            continue
        writer.close()
        return
    raise RuntimeError(f"proxy on {port} did not come up")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--replicas", default="1,2,3,4", help='gateway counts (default "1,2,3,4")')
    parser.add_argument("--seconds", type=float, default=10.0, help="per row (default 10)")
    parser.add_argument(
        "--connections", type=int, default=24, help="wrk -c (default 24: a multiple of 1 to 4)"
    )
    parser.add_argument("--era", choices=("modern", "legacy"), default="modern")
    parser.add_argument("--log-level", default="warning", help="CRANK_LOG_LEVEL of the gateways")
    sys.exit(asyncio.run(main(parser.parse_args())))
