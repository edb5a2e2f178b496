"""Approved calls per second: two gateway processes run N approved calls, each exactly once.

    .venv/bin/python bench/approvals_throughput.py [--approvals 5000] [--modes endpoint,bulk]
        [--approvers 32] [--workers N] [--log-level warning]

Needs wrk (``apt install wrk``), taskset, two CPUs and a PostgreSQL
(``CRANK_BENCH_DATABASE_URL``, default the local server); it creates and drops
its own database and seeds it in process through the control-plane app
(bench/gateway_tools_call.py's helpers start, wait for and stop the servers).

Set-up. The upstream is bench/orders_upstream.py, a bare ASGI app under granian
that answers ``POST /orders`` at once and counts requests per
``Idempotency-Key``. The operation ``create_order`` (``safety.approval: true``,
``execution_config.idempotency`` from the argument ``request_id``, no retries)
is published to agent ``shop`` with an agent key and an approval key. Two
gateways (``mcp_gateway.app:create_app`` under granian, one worker each,
``CRANK_APPROVAL_WORKERS`` from ``--workers`` or the default) run on the
first and the second CPU; the upstream shares the second; PostgreSQL and the
bench itself are not pinned.

Each mode inserts N ``pending`` rows the way the approval gate stores them
(validated arguments, their hash, the built request; one statement, not
timed), then approves them all:

- *endpoint*: ``POST /v1/bench/shop/approvals/{id}/approve`` with the approval
  key and ``{"approve": "yes"}``, ``--approvers`` requests at a time, spread
  over both gateways: the whole path a human's approval takes (the decision's
  transaction and its NOTIFY, then the worker);
- *bulk*: one ``UPDATE ... SET status = 'approved'`` of every row plus one
  ``NOTIFY crank_approvals`` in the same transaction: the worker alone.

The figure is N / (last ``completed_at`` - first ``decided_at``), both the
database's clock. Printed per mode: that rate, each gateway's share, attempts,
database transactions per approved call (``pg_stat_database`` of the bench's
database, read as bench/gateway_tools_call.py does; the gateway's pool runs in
autocommit, so a statement or a pool check is one transaction; the approvals'
own decision statements count too) and the upstream's counts, which must be
exactly one request for every approval's key and none other (the bench exits
1 otherwise). The baseline, measured in the same run: the upstream's own
``POST /orders`` rate under wrk at 16 connections (a second copy of it, so
its counts stay clean).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
from psycopg.types.json import Jsonb

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gateway_tools_call import (  # noqa: E402
    cpu_ticks_by_group,
    db_transactions,
    free_port,
    run_wrk,
    serve,
    stop,
    wait_up,
    write_lua,
)
from bench.harness import SECRET, admin_api, create_database, drop_database, grant_loopback  # noqa: E402
from mcp_gateway.approvals.store import CHANNEL, new_approval_id  # noqa: E402
from shared.db import connect  # noqa: E402
from shared.engine.canonical import arguments_hash  # noqa: E402
from shared.engine.compiler import compile_operation  # noqa: E402
from shared.engine.spec import operation_from_builtins  # noqa: E402
from shared.logging import configure_logging  # noqa: E402

TOOL = "create_order"
TARGET_PER_S = 500.0  # the performance issue's target 9
SETTLE_S = 11.0  # > PGSTAT_IDLE_INTERVAL (10 s): every backend has flushed its counters
_serial = itertools.count(1)


def order_spec(port: int) -> dict[str, Any]:
    return {
        "name": TOOL,
        "description": (
            "Creates an order for one item. Use when the user confirms a purchase. "
            "Returns the order id."
        ),
        "input": {
            "type": "object",
            "properties": {
                "item": {"type": "string", "description": "Item code, e.g. sku-1"},
                "request_id": {"type": "string", "description": "Idempotency key, e.g. r-1"},
            },
            "required": ["item", "request_id"],
            "additionalProperties": False,
        },
        "request": {"method": "POST", "url": f"http://127.0.0.1:{port}/orders"},
        "response": {"select": "{id: id, key: key}"},
        "execution_config": {
            "timeout_ms": 5000,
            "retries": 0,
            "idempotency": {"argument": "request_id", "header": "Idempotency-Key"},
        },
        "safety": {"approval": True},
    }


async def seed(url: str, upstream_port: int) -> tuple[str, str]:
    """The workspace, operation and agent; (agent key, approval key)."""
    async with admin_api(url) as checked:
        await checked("POST", "/api/v1/workspaces", json={"slug": "bench"})
        base = "/api/v1/workspaces/bench"
        await grant_loopback(checked, "bench", upstream_port)
        op = await checked("POST", f"{base}/operations", json=order_spec(upstream_port))
        await checked(
            "POST", f"{base}/operations/{TOOL}/publish", h={"If-Match": op.headers["etag"]}
        )
        agent = await checked("POST", f"{base}/agents", json={"slug": "shop", "operations": [TOOL]})
        await checked("POST", f"{base}/agents/shop/publish", h={"If-Match": agent.headers["etag"]})
        keys = [
            (await checked("POST", f"{base}/keys", json={"agent": "shop", "kind": kind})).json()
            for kind in ("agent", "approval")
        ]
        return str(keys[0]["key"]), str(keys[1]["key"])


async def insert_pending(url: str, count: int) -> dict[str, str]:
    """``count`` pending rows as the approval gate stores them; {approval id: idempotency key}."""
    async with await connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            """SELECT o.id, o.workspace_id, v.version, v.spec, a.id AS agent_id,
                      (SELECT k.id FROM api_keys k WHERE k.agent_id = a.id AND k.kind = 'agent'
                        LIMIT 1) AS key_id
                 FROM operations o
                 JOIN operation_versions v ON v.operation_id = o.id AND v.version = o.latest_version
                 JOIN agents a ON a.workspace_id = o.workspace_id AND a.slug = 'shop'
                WHERE o.name = %s""",
            (TOOL,),
        )
        op = await cur.fetchone()
        assert op is not None
        compiled = compile_operation(operation_from_builtins(op["spec"]))
        rows, keys = [], {}
        for _ in range(count):
            n = next(_serial)
            arguments = compiled.validate({"item": f"sku-{n}", "request_id": f"req-{n}"})
            approval_id = new_approval_id()
            keys[approval_id] = f"req-{n}"
            rows.append(
                (
                    approval_id,
                    op["workspace_id"],
                    op["agent_id"],
                    op["id"],
                    op["key_id"],
                    TOOL,
                    op["version"],
                    Jsonb(arguments),
                    arguments_hash(arguments),
                    Jsonb(compiled.build(arguments, {}).redacted()),
                )
            )
        async with conn.cursor() as insert:
            await insert.executemany(
                """INSERT INTO approvals (id, workspace_id, agent_id, operation_id, key_id, tool,
                                          version, arguments, arguments_hash, request,
                                          max_attempts, expires_at)
                   VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, 3,
                           now() + interval '1 hour')""",
                rows,
            )
    return keys


async def approve_by_endpoint(
    gateways: list[str], approval_key: str, ids: list[str], at_once: int
) -> None:
    """Every id through the approve endpoint, ``at_once`` requests in flight, round robin."""
    queue = list(enumerate(ids))
    failures: list[str] = []
    headers = {"Authorization": f"Bearer {approval_key}", "Content-Type": "application/json"}
    body = b'{"approve": "yes"}'

    async def approver(http: aiohttp.ClientSession) -> None:
        while queue:
            index, approval_id = queue.pop()
            url = f"{gateways[index % len(gateways)]}/v1/bench/shop/approvals/{approval_id}/approve"
            async with http.post(url, data=body, headers=headers) as response:
                if response.status != 200:
                    failures.append(f"{response.status} {await response.text()}")

    connector = aiohttp.TCPConnector(limit=at_once)
    async with aiohttp.ClientSession(connector=connector) as http:
        await asyncio.gather(*(approver(http) for _ in range(at_once)))
    if failures:
        raise RuntimeError(f"{len(failures)} approvals refused, e.g. {failures[0]}")


async def approve_in_bulk(url: str, ids: list[str]) -> None:
    async with await connect(url) as conn:
        cur = await conn.execute(
            """UPDATE approvals SET status = 'approved', decided_at = now(),
                      decided_by = 'bench' WHERE id = ANY(%s) AND status = 'pending'""",
            (ids,),
        )
        assert cur.rowcount == len(ids)
        await conn.execute(f"NOTIFY {CHANNEL}")
        await conn.commit()


async def wait_finished(url: str, timeout_s: float) -> None:
    """Until no row is approved or executing (the claimable index answers; a count over
    the mode's ids every few milliseconds would load the database under test)."""
    deadline = time.monotonic() + timeout_s
    async with await connect(url, autocommit=True) as conn:
        while time.monotonic() < deadline:
            cur = await conn.execute(
                "SELECT EXISTS (SELECT FROM approvals WHERE status IN ('approved', 'executing'))"
                " AS busy"
            )
            row = await cur.fetchone()
            if row is not None and not row["busy"]:
                return
            await asyncio.sleep(0.1)
    raise RuntimeError(f"not every approval finished within {timeout_s:g} s")


def group_cpu_s(pgid: int) -> float:
    """User + system CPU seconds of every live process in the group (a gateway and its worker)."""
    return cpu_ticks_by_group().get(pgid, 0) / os.sysconf("SC_CLK_TCK")


async def upstream_counts(port: int) -> dict[str, int]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"http://127.0.0.1:{port}/_counts") as response,
    ):
        return dict(json.loads(await response.read()))


async def run_mode(
    mode: str, args: argparse.Namespace, url: str, server: str, name: str, ctx: dict[str, Any]
) -> dict[str, Any]:
    keys = await insert_pending(url, args.approvals)
    ids = list(keys)
    before = await upstream_counts(ctx["upstream_port"])
    await asyncio.sleep(SETTLE_S)  # every backend has flushed its counters
    db_before, window_started = db_transactions(server, name), time.monotonic()
    cpu_before = [group_cpu_s(pgid) for pgid in ctx["gateway_pgids"]]
    if mode == "endpoint":
        await approve_by_endpoint(ctx["gateways"], ctx["approval_key"], ids, args.approvers)
    else:
        await approve_in_bulk(url, ids)
    await wait_finished(url, timeout_s=max(60.0, args.approvals / 20))
    cpu_s = [
        group_cpu_s(pgid) - b for pgid, b in zip(ctx["gateway_pgids"], cpu_before, strict=True)
    ]
    await asyncio.sleep(SETTLE_S)
    window_s = time.monotonic() - window_started
    db_window = db_transactions(server, name) - db_before - ctx["idle_per_s"] * window_s
    async with await connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            """SELECT extract(epoch FROM max(completed_at) - min(decided_at))::float8 AS span,
                      extract(epoch FROM max(decided_at) - min(decided_at))::float8 AS deciding,
                      count(*) FILTER (WHERE status = 'completed') AS completed,
                      max(attempt) AS max_attempt, sum(attempt) AS attempts
                 FROM approvals WHERE id = ANY(%s)""",
            (ids,),
        )
        summary = await cur.fetchone()
        cur = await conn.execute(
            "SELECT lease_owner, count(*) AS n FROM approvals WHERE id = ANY(%s) "
            "GROUP BY lease_owner ORDER BY lease_owner",
            (ids,),
        )
        owners = await cur.fetchall()
    assert summary is not None
    after = await upstream_counts(ctx["upstream_port"])
    seen = Counter({k: n - before.get(k, 0) for k, n in after.items() if n != before.get(k, 0)})
    expected = set(keys.values())
    problems = []
    if summary["completed"] != len(ids):
        problems.append(f"{len(ids) - summary['completed']} approvals not completed")
    if set(seen) != expected:
        missing, extra = expected - set(seen), set(seen) - expected
        problems.append(f"upstream keys: {len(missing)} missing, {len(extra)} unexpected")
    repeated = {k: n for k, n in seen.items() if n != 1}
    if repeated:
        problems.append(f"{len(repeated)} keys reached the upstream more than once")
    return {
        "mode": mode,
        "rate": len(ids) / summary["span"],
        "span": summary["span"],
        "deciding": summary["deciding"],
        "cpu_s": cpu_s,
        "owners": [(row["lease_owner"], row["n"]) for row in owners],
        "max_attempt": summary["max_attempt"],
        "attempts": summary["attempts"],
        "upstream": sum(seen.values()),
        "keys": len(seen),
        "db_per_call": db_window / len(ids),
        "problems": problems,
    }


def direct_rate(cpu: int, port: int, workdir: Path, seconds: float) -> float:
    script = write_lua(
        workdir,
        "direct",
        "POST",
        '{"item": "sku-0", "request_id": "wrk"}',
        {"Content-Type": "application/json", "Idempotency-Key": "wrk"},
    )
    run_wrk(cpu, f"http://127.0.0.1:{port}/orders", script, 16, 1)  # warm up
    return run_wrk(cpu, f"http://127.0.0.1:{port}/orders", script, 16, seconds).rps


def report(result: dict[str, Any], n: int, direct: float) -> None:
    rate = result["rate"]
    print(f"\n{result['mode']}: {n} approvals in {result['span']:.2f} s")
    print(
        f"  approved calls/s {rate:8.0f}   x direct upstream {rate / direct:.2f}   "
        f"target {TARGET_PER_S:g}/s: {'met' if rate >= TARGET_PER_S else 'MISSED'}"
    )
    share = ", ".join(f"{owner.rsplit('-', 2)[1]}: {count}" for owner, count in result["owners"])
    print(f"  per process (pid: rows) {share}")
    if result["deciding"] > 0:
        print(f"  decisions/s {n / result['deciding']:8.0f} (first to last decided_at)")
    cpu = " and ".join(f"{100 * s / result['span']:.0f}%" for s in result["cpu_s"])
    per_call = 1000 * sum(result["cpu_s"]) / n
    print(f"  gateway CPU {per_call:.2f} ms per approved call; each gateway busy {cpu} of the span")
    print(
        f"  attempts {result['attempts']} (max {result['max_attempt']}); upstream requests "
        f"{result['upstream']} over {result['keys']} keys; "
        f"db transactions per approved call {result['db_per_call']:.2f}"
    )
    for problem in result["problems"]:
        print(f"  FAILED: {problem}")


async def main(args: argparse.Namespace) -> int:
    for tool, package in (("wrk", "wrk"), ("taskset", "util-linux")):
        if shutil.which(tool) is None:
            print(f"{tool} not found: apt install {package}", file=sys.stderr)
            return 2
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        print("needs two CPUs", file=sys.stderr)
        return 2
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or not set(modes) <= {"endpoint", "bulk"} or args.approvals < 1:
        print("--modes takes endpoint and/or bulk; --approvals >= 1", file=sys.stderr)
        return 2
    configure_logging("warning", json=False)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    server, name, url = create_database("approvals")
    workdir = Path(tempfile.mkdtemp(prefix="crank-bench-approvals-"))
    processes: list[subprocess.Popen[bytes]] = []
    try:
        ports = {n: free_port() for n in ("direct", "upstream", "first", "second")}
        _, approval_key = await seed(url, ports["upstream"])
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
        env |= {"PYTHONPATH": str(ROOT)}
        gateway_env = env | {
            "CRANK_DATABASE_URL": url,
            "CRANK_SECRET_KEY": SECRET,
            "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{ports['upstream']}",
            "CRANK_RATE_LIMIT": "off",
            "CRANK_LOG_LEVEL": args.log_level,
        }
        if args.workers:
            gateway_env["CRANK_APPROVAL_WORKERS"] = str(args.workers)
        logs = {n: workdir / f"{n}.log" for n in ports}
        upstream_app = "bench.orders_upstream:app"
        cpu = {"direct": cpus[0], "upstream": cpus[1], "first": cpus[0], "second": cpus[1]}
        for label in ("direct", "upstream"):
            processes.append(
                serve(cpu[label], upstream_app, ports[label], env, factory=False, log=logs[label])
            )
        for label in ("first", "second"):
            processes.append(
                serve(
                    cpu[label],
                    "mcp_gateway.app:create_app",
                    ports[label],
                    gateway_env | {"CRANK_METRICS_PORT": str(free_port())},
                    factory=True,
                    log=logs[label],
                    loop=args.gateway_loop,
                )
            )
        for process, label in zip(processes, ports, strict=True):
            path = "/_counts" if label in ("direct", "upstream") else "/readyz"
            await wait_up(f"http://127.0.0.1:{ports[label]}{path}", process, logs[label])
        workers = args.workers or "default"
        print(
            f"gateways on CPUs {cpu['first']} and {cpu['second']} (one granian worker each, "
            f"--loop {args.gateway_loop}, CRANK_APPROVAL_WORKERS {workers}); the upstream on "
            f"CPU {cpu['upstream']}; {args.approvals} approvals per mode",
            flush=True,
        )
        direct = await asyncio.to_thread(
            direct_rate, cpus[1], ports["direct"], workdir, args.seconds
        )
        print(f"baseline: the upstream's own POST /orders, wrk -c16: {direct:.0f} req/s")
        # The background (refresher polls, heartbeats, pool checks), per second.
        await asyncio.sleep(SETTLE_S)
        before, started = db_transactions(server, name), time.monotonic()
        await asyncio.sleep(2 * SETTLE_S)
        idle_per_s = (db_transactions(server, name) - before) / (time.monotonic() - started)
        print(f"idle database: {idle_per_s:.1f} transactions/s (subtracted below)")
        ctx = {
            "upstream_port": ports["upstream"],
            "gateways": [f"http://127.0.0.1:{ports[g]}" for g in ("first", "second")],
            "approval_key": approval_key,
            "idle_per_s": idle_per_s,
            "gateway_pgids": [p.pid for p in processes[2:]],
        }
        failed = False
        for mode in modes:
            result = await run_mode(mode, args, url, server, name, ctx)
            report(result, args.approvals, direct)
            failed = failed or bool(result["problems"])
        for label in ("first", "second"):
            if "Traceback" in logs[label].read_text(errors="replace"):
                print(f"FAILED: a traceback in the {label} gateway's log ({logs[label]})")
                failed = True
        return 1 if failed else 0
    finally:
        for process in reversed(processes):
            stop(process)
        shutil.rmtree(workdir, ignore_errors=True)
        drop_database(server, name)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--approvals", type=int, default=5000, help="per mode (default 5000)")
    parser.add_argument(
        "--modes", default="endpoint,bulk", help='endpoint and/or bulk (default "endpoint,bulk")'
    )
    parser.add_argument(
        "--approvers", type=int, default=32, help="approve requests in flight (endpoint mode)"
    )
    parser.add_argument(
        "--workers", type=int, default=0, help="CRANK_APPROVAL_WORKERS (default: the gateway's)"
    )
    parser.add_argument("--seconds", type=float, default=5.0, help="the baseline's wrk run")
    parser.add_argument("--log-level", default="warning", help="CRANK_LOG_LEVEL of the gateways")
    parser.add_argument(
        "--gateway-loop", default="auto", choices=("auto", "asyncio", "uvloop"), help="granian"
    )
    sys.exit(asyncio.run(main(parser.parse_args())))
