"""Soak with faults: two gateway replicas under mixed load while things break; the books must balance.

    .venv/bin/python bench/soak.py [--duration 600] [--cpu-target 0.7] [--max-rate 400]
        [--recovery 10] [--drain 180] [--keep-logs DIR] [--ledger-json FILE]

What runs (bench/soak_cluster.py): an embedded PostgreSQL of the soak's own (a
fresh data directory in a temporary directory), two gateways (granian, one
worker each) behind a round-robin TCP proxy on loopback (bench/soak_proxy.py),
an upstream that counts its own executions and a webhook receiver
(bench/soak_upstream.py), all seeded through the control-plane API
(bench/soak_catalog.py).

The load (bench/soak_load.py): tools/list, plain calls, idempotent calls,
DELETEs with their confirmation, approval-gated calls that a scripted approver
approves or denies, and the webhooks those approvals send. Pacing: a target
rate adjusted every 5 s so that the two gateways together use ``--cpu-target``
cores (their process groups' CPU time from /proc), held still while a fault
lasts, between 1 and ``--max-rate`` arrivals a second. On a machine too busy to
reach the target the rate stops at ``--max-rate`` or where the load generator
saturates; the ledger prints the CPU reached.

The faults (bench/soak_faults.py), spaced through the run: the upstream slow,
a replica SIGKILLed and restarted, a 500 storm, PostgreSQL stopped and started,
the upstream refusing connections, a 429 storm, the upstream resetting
connections (before and after executing). Then the load stops, the drain
waits (bounded) until every approval is decided and finished and every
webhook delivered, and the ledger (bench/soak_ledger.py) prints each
invariant PASS/FAIL with its counts. Exit status 1 when any fails, 2 when the
soak could not run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gateway_tools_call import free_port  # noqa: E402
from bench.harness import SECRET  # noqa: E402
from bench.soak_catalog import seed  # noqa: E402
from bench.soak_cluster import Process, SoakPostgres, gateway, python_module  # noqa: E402
from bench.soak_faults import Faults  # noqa: E402
from bench.soak_ledger import (  # noqa: E402
    Facts,
    approval_outcomes_delivered,
    approvals_decided_once,
    approvals_executed_at_most_once,
    confirmations_single_use,
    idempotent_calls_once,
    no_unexplained_failures,
    p99_stable,
    rss_growth,
    summary,
    webhooks_delivered,
)
from bench.soak_load import REQUEST_TIMEOUT_S, Client, Pacer  # noqa: E402
from shared.db import connect  # noqa: E402
from shared.logging import configure_logging  # noqa: E402

PACE_EVERY_S = 5.0
RSS_EVERY_S = 10.0
SATURATED_P50_S = 0.1  # a median exchange slower than this: the load generator or machine is full
KILLED, SURVIVOR = "gateway-b", "gateway-a"


class Soak:
    """The cluster the fault schedule acts on, and the samplers around the load."""

    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        self.args, self.workdir = args, workdir
        self.ports = {
            n: free_port() for n in ("upstream", "control", "receiver", "a", "b", "proxy")
        }
        self.postgres: SoakPostgres | None = None
        self.processes: dict[str, Process] = {}
        self.client: Client | None = None
        self.kills: list[tuple[str, float]] = []
        self.rss: dict[str, list[tuple[float, int]]] = {SURVIVOR: [], KILLED: []}
        self.cpu: list[tuple[float, float, float, bool]] = []
        self.notes: list[str] = []

    def now(self) -> float:
        assert self.client is not None
        return self.client.recorder.now()

    def log(self, message: str) -> None:
        at = f"{self.now():7.1f} s" if self.client is not None else "  setup"
        print(f"[{at}] {message}", flush=True)

    # --- setting up ----------------------------------------------------------------------

    async def start(self) -> tuple[str, str]:
        self.postgres = await asyncio.to_thread(SoakPostgres, self.workdir / "pgdata")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
        env["PYTHONPATH"] = str(ROOT)
        p = self.ports
        upstream = python_module(
            "upstream",
            "bench.soak_upstream",
            [
                "--port",
                str(p["upstream"]),
                "--control-port",
                str(p["control"]),
                "--receiver-port",
                str(p["receiver"]),
            ],
            env,
            self.workdir / "upstream.log",
            f"http://127.0.0.1:{p['control']}/_ledger",
        )
        self.processes["upstream"] = upstream
        upstream.start()
        await upstream.wait_ready()
        seeded = await seed(self.postgres.url, p["upstream"], p["receiver"])
        async with aiohttp.ClientSession() as http:
            await http.put(f"http://127.0.0.1:{p['control']}/_secret", data=seeded.webhook_secret)
        gateway_env = env | {
            "CRANK_DATABASE_URL": self.postgres.url,
            "CRANK_SECRET_KEY": SECRET,
            "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{p['upstream']},127.0.0.1:{p['receiver']}",
            "CRANK_RATE_LIMIT": "off",
            "CRANK_LOG_LEVEL": "warning",
            "CRANK_WEBHOOK_RETRY_BASE_MS": "500",  # a failed delivery retries soon: a short drain
        }
        for label, port in ((SURVIVOR, p["a"]), (KILLED, p["b"])):
            env_one = gateway_env | {"CRANK_METRICS_PORT": str(free_port())}
            self.processes[label] = gateway(label, port, env_one, self.workdir / f"{label}.log")
            self.processes[label].start()
        for label in (SURVIVOR, KILLED):
            await self.processes[label].wait_ready()
        proxy = python_module(
            "proxy",
            "bench.soak_proxy",
            [
                "--port",
                str(p["proxy"]),
                "--backend",
                f"127.0.0.1:{p['a']}",
                "--backend",
                f"127.0.0.1:{p['b']}",
            ],
            env,
            self.workdir / "proxy.log",
            f"http://127.0.0.1:{p['proxy']}/readyz",
        )
        self.processes["proxy"] = proxy
        proxy.start()
        await proxy.wait_ready()
        return seeded.agent_key, seeded.approval_key

    def close(self) -> None:
        for process in reversed(list(self.processes.values())):
            process.stop()
        if self.postgres is not None:
            self.postgres.close()

    # --- the faults (bench/soak_faults.py's Cluster) -------------------------------------

    async def kill_replica(self) -> None:
        self.kills.append((KILLED, self.now()))
        self.log(f"SIGKILL {KILLED}")
        await asyncio.to_thread(self.processes[KILLED].kill)

    async def start_killed_replica(self) -> None:
        process = self.processes[KILLED]
        process.start()
        await process.wait_ready()
        self.log(f"{KILLED} restarted and ready")

    async def stop_database(self) -> None:
        assert self.postgres is not None
        self.log("PostgreSQL: stopping (fast)")
        await asyncio.to_thread(self.postgres.stop_server)

    async def start_database(self) -> None:
        assert self.postgres is not None
        await asyncio.to_thread(self.postgres.start_server)
        self.log("PostgreSQL: started")

    async def set_upstream_fault(self, mode: str) -> None:
        self.log(f"upstream fault: {mode}")
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{self.ports['control']}/_fault/{mode}"
            async with http.put(url) as response:
                response.raise_for_status()

    # --- samplers ------------------------------------------------------------------------

    def gateway_cpu_s(self) -> float:
        return sum(self.processes[label].cpu_s() for label in (SURVIVOR, KILLED))

    async def pace(self, pacer: Pacer, faults: Faults, stop: asyncio.Event) -> None:
        """Adjusts the arrival rate toward ``--cpu-target`` cores of gateway CPU, and backs
        off instead when the load itself saturates (arrivals shed, or the median exchange
        slower than ``SATURATED_P50_S``): then the machine, not the gateways, is the limit."""
        assert self.client is not None
        recorder, books = self.client.recorder, self.client.books
        last_cpu, last_at, last_log = self.gateway_cpu_s(), time.monotonic(), 0.0
        seen, shed = 0, 0
        while not await _wait(stop, PACE_EVERY_S):
            cpu, at = self.gateway_cpu_s(), time.monotonic()
            cores = (cpu - last_cpu) / (at - last_at)
            last_cpu, last_at = cpu, at
            recent = sorted(e.latency_s for e in recorder.exchanges[seen:] if e.kind != "approver")
            seen, shed_now, shed = len(recorder.exchanges), books.shed - shed, books.shed
            p50 = recent[len(recent) // 2] if recent else 0.0
            if cores < 0:  # a replica was replaced: its CPU time restarted from zero
                continue
            saturated = shed_now > 0 or p50 > SATURATED_P50_S
            self.cpu.append((self.now(), pacer.rate, cores, saturated))
            if not faults.active(self.now()):
                if saturated:
                    pacer.rate *= 0.8
                elif cores > 0:
                    # Damped, and at most x1.25 up or /2 down a step: CPU readings over 5 s
                    # are noisy, and a rate that overshoots saturates the machine first.
                    pacer.rate *= min(1.25, max(0.5, (self.args.cpu_target / cores) ** 0.7))
                pacer.rate = min(self.args.max_rate, max(1.0, pacer.rate))
            if self.now() - last_log >= 30:
                last_log = self.now()
                self.log(
                    f"rate {pacer.rate:.0f}/s, gateways {cores:.2f} cores, p50 {1000 * p50:.0f} ms, "
                    f"{len(recorder.exchanges)} exchanges{', saturated' if saturated else ''}"
                )

    def cpu_seconds(self) -> dict[str, float]:
        """CPU time so far of each process (a restarted replica's since its restart)."""
        me = resource.getrusage(resource.RUSAGE_SELF)
        seconds = {label: process.cpu_s() for label, process in self.processes.items()}
        return seconds | {"load generator (this process)": me.ru_utime + me.ru_stime}

    async def sample_rss(self, stop: asyncio.Event) -> None:
        while True:
            for label in (SURVIVOR, KILLED):
                self.rss[label].append((self.now(), self.processes[label].rss_bytes()))
            if await _wait(stop, RSS_EVERY_S):
                return

    # --- the end -------------------------------------------------------------------------

    async def drained(self) -> bool:
        assert self.postgres is not None
        async with await connect(self.postgres.url, autocommit=True) as conn:
            cur = await conn.execute(
                """SELECT (SELECT count(*) FROM approvals
                            WHERE status IN ('pending', 'approved', 'executing')) AS open,
                          (SELECT count(*) FROM webhook_deliveries
                            WHERE status IN ('pending', 'delivering')) AS outbox"""
            )
            row = await cur.fetchone()
        assert row is not None
        return bool(row["open"] == 0 and row["outbox"] == 0)

    async def drain(self, timeout_s: float) -> bool:
        """Waits until nothing is open; False past ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while True:
            if await self.drained():
                return True
            if time.monotonic() >= deadline:
                return False
            await asyncio.sleep(1.0)

    async def facts(self) -> Facts:
        assert self.postgres is not None
        ledger = f"http://127.0.0.1:{self.ports['control']}/_ledger"
        async with aiohttp.ClientSession() as http, http.get(ledger) as response:
            upstream = await response.json()
        async with await connect(self.postgres.url, autocommit=True) as conn:
            cur = await conn.execute(
                """SELECT id, status, attempt, arguments->>'request_id' AS request_id,
                          response_payload->>'id' AS answered_id,
                          delivered_at IS NOT NULL AS delivered FROM approvals"""
            )
            approvals = await cur.fetchall()
            cur = await conn.execute(
                """SELECT resource_name, count(*) AS n FROM audit_log
                    WHERE action IN ('approval.approved', 'approval.denied')
                    GROUP BY resource_name"""
            )
            audited = Counter({r["resource_name"]: int(r["n"]) for r in await cur.fetchall()})
            cur = await conn.execute(
                "SELECT webhook_id, approval_id, event, status, attempts FROM webhook_deliveries"
            )
            deliveries = await cur.fetchall()
        assert self.client is not None
        log_times: dict[str, list[float]] = {}
        for label in (SURVIVOR, KILLED):
            for event, at in log_entries(self.processes[label].log):
                log_times.setdefault(event, []).append(at - self.client.recorder.started_wall)
        return Facts(
            upstream, approvals, audited, deliveries, self.rss, self.kills, self.cpu, log_times
        )


def log_events(log: Path) -> Counter[str]:
    """The gateway's structured log lines by event and level (the soak runs it at warning)."""
    return Counter(f"{entry.get('event')} ({entry.get('level')})" for entry in _json_lines(log))


def log_entries(log: Path) -> list[tuple[str, float]]:
    """(event, Unix time) of each structured log line."""
    found = []
    for entry in _json_lines(log):
        stamp = str(entry.get("timestamp", "")).replace("Z", "+00:00")
        try:
            found.append((str(entry.get("event")), datetime.fromisoformat(stamp).timestamp()))
        except ValueError:
            continue
    return found


def _json_lines(log: Path) -> list[dict[str, Any]]:
    entries = []
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                entries.append(json.loads(line))
            except ValueError:
                continue
    return entries


def log_errors(log: Path) -> int:
    """Lines logged at error or critical, and tracebacks nothing caught. A warning that
    carries its exception (a 503 while the database restarts) is not counted."""
    count = 0
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith("Traceback (most recent call last)") or (
            line.startswith("{") and ('"level": "error"' in line or '"level": "critical"' in line)
        ):
            count += 1
    return count


async def _wait(stop: asyncio.Event, seconds: float) -> bool:
    """True when ``stop`` is set within ``seconds``."""
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True


async def run(args: argparse.Namespace, workdir: Path) -> int:
    soak = Soak(args, workdir)
    try:
        agent_key, approval_key = await soak.start()
        print(
            f"soak: {args.duration:g} s, target {args.cpu_target:g} cores of gateway CPU "
            f"(rate {args.start_rate:g}/s to start, at most {args.max_rate:g}/s); "
            f"{os.cpu_count()} CPUs; logs in {workdir}",
            flush=True,
        )
        connector = aiohttp.TCPConnector(force_close=True, limit=512)
        timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
        async with aiohttp.ClientSession(connector=connector, timeout=timeout) as http:
            base = f"http://127.0.0.1:{soak.ports['proxy']}"
            client = soak.client = Client(http, base, agent_key, approval_key)
            faults = Faults(args.duration, args.recovery)
            pacer = Pacer(client, args.start_rate)
            load_stop, approver_stop, sampler_stop = (
                asyncio.Event(),
                asyncio.Event(),
                asyncio.Event(),
            )
            tasks = [
                asyncio.create_task(pacer.run(load_stop)),
                asyncio.create_task(soak.pace(pacer, faults, load_stop)),
                asyncio.create_task(faults.run(soak, load_stop)),
            ]
            approver = asyncio.create_task(client.approver(approver_stop))
            sampler = asyncio.create_task(soak.sample_rss(sampler_stop))
            await asyncio.sleep(args.duration)
            load_end = soak.now()
            cpu_s = soak.cpu_seconds()
            load_stop.set()
            sampler_stop.set()
            await asyncio.gather(*tasks, sampler)
            left = await pacer.finish(timeout_s=120)
            soak.log(f"load stopped; {left} flows cancelled after 120 s; draining")
            drained = await soak.drain(args.drain)
            await asyncio.sleep(1.0)  # the approver's last decisions, the receiver's last answers
            approver_stop.set()
            await approver
            soak.log("drained" if drained else f"NOT drained within {args.drain:g} s")
            facts = await soak.facts()
        warmup = min(60.0, 0.2 * args.duration)  # caches and pools fill first
        ex, books = client.recorder.exchanges, client.books
        checks = [
            approvals_decided_once(books, facts),
            approvals_executed_at_most_once(facts),
            approval_outcomes_delivered(books, facts, ex),
            idempotent_calls_once(books, facts, faults),
            confirmations_single_use(books, facts),
            webhooks_delivered(facts),
            no_unexplained_failures(ex, faults),
            p99_stable(ex, faults, load_end, warmup),
            rss_growth(facts, SURVIVOR, warmup, load_end),
        ]
        print("\n=== The soak's ledger")
        for line in summary(ex, books, facts, faults, load_end, cpu_s):
            print(line)
        print()
        for check in checks:
            print(f"{check.verdict}  {check.name}")
            for line in check.lines:
                print(f"      {line}")
        for label in (SURVIVOR, KILLED):
            events = log_events(soak.processes[label].log)
            print(
                f"{label} log: "
                + (", ".join(f"{e} {n}" for e, n in events.most_common()) or "quiet")
            )
        errors = {label: log_errors(process.log) for label, process in soak.processes.items()}
        print(
            "errors in the processes' logs (level error, or a bare traceback): "
            + (", ".join(f"{label} {n}" for label, n in errors.items() if n) or "none")
        )
        if not drained:
            print("FAIL  drain: work was still open at the end")
        if books.crashed:
            print(f"FAIL  load flows raised: {dict(books.crashed)}, e.g. {books.crash_examples}")
        failed = not drained or bool(books.crashed) or not all(c.passed for c in checks)
        print(f"\nsoak: {'FAILED' if failed else 'passed'}")
        if args.ledger_json is not None:
            args.ledger_json.write_text(
                json.dumps(
                    {
                        "passed": not failed,
                        "drained": drained,
                        "checks": [
                            {"name": c.name, "verdict": c.verdict, "lines": c.lines} for c in checks
                        ],
                        "faults": [[w.name, w.start, w.end] for w in faults.windows],
                        "flows": dict(books.flows),
                        "approvals": len(facts.approvals),
                        "accepted_idempotent": len(books.accepted),
                        "confirmed_deletes": len(books.confirmed),
                        "webhooks": len(facts.deliveries),
                    },
                    indent=2,
                )
            )
        return 1 if failed else 0
    finally:
        soak.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of load (600)")
    parser.add_argument("--cpu-target", type=float, default=0.7, help="gateway cores (0.7)")
    parser.add_argument("--start-rate", type=float, default=40.0, help="arrivals/s to start (40)")
    parser.add_argument("--max-rate", type=float, default=400.0, help="arrivals/s at most (400)")
    parser.add_argument("--recovery", type=float, default=10.0, help="s after a fault it is blamed")
    parser.add_argument("--drain", type=float, default=180.0, help="s the drain may take (180)")
    parser.add_argument("--keep-logs", type=Path, help="copy the processes' logs here")
    parser.add_argument("--ledger-json", type=Path, help="also write the ledger here as JSON")
    args = parser.parse_args()
    configure_logging("warning", json=False)  # the in-process seeding logs every request
    logging.getLogger("httpx").setLevel(logging.WARNING)
    workdir = Path(tempfile.mkdtemp(prefix="crank-soak-"))
    try:
        return asyncio.run(run(args, workdir))
    finally:
        if args.keep_logs is not None:
            args.keep_logs.mkdir(parents=True, exist_ok=True)
            for log in workdir.glob("*.log"):
                shutil.copy(log, args.keep_logs / log.name)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
