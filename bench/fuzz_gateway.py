"""The gateway's fuzz tests as a long run: the same strategies and oracles
(tests/gateway/fuzz), for as many examples or as long as asked.

    .venv/bin/python bench/fuzz_gateway.py [--examples 500] [--duration 300]

Each round runs five fuzz runs of ``--examples`` cases each against one real
gateway process (granian, one worker) over the fuzz catalog: the MCP endpoint
in the legacy and the modern era, tools/call arguments in both eras, and the
approval endpoints (over eight new pending approvals per round). Rounds repeat
with new random cases until ``--duration`` seconds have passed (at least one round).
A case that breaks a rule is shrunk by Hypothesis and printed with the blob
that reproduces it (``@reproduce_failure``); the run goes on
with the next one. At the end: every outcome and how often it came, the
violations, the worker's RSS at start, at the end and at its peak against the
bound of tests/gateway/fuzz/fuzzed.py, and whether the process still serves.
Exit status 1 on any violation, a dead process or the memory bound crossed.

Needs a PostgreSQL (``CRANK_BENCH_DATABASE_URL``, default the local server); it
creates and drops its own database and seeds it in process through the
control-plane app.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path

from hypothesis import HealthCheck, settings
from litestar.testing import AsyncTestClient

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import admin_token, create_database, drop_database  # noqa: E402
from control_plane.app import create_app  # noqa: E402
from shared.settings import Settings  # noqa: E402
from tests.gateway.fuzz.catalog import gateway_env, seed, serve_echo  # noqa: E402
from tests.gateway.fuzz.fuzzed import MAX_WORKER_RSS_MIB  # noqa: E402
from tests.gateway.fuzz.oracles import worker_rss_mib  # noqa: E402
from tests.gateway.fuzz.runs import (  # noqa: E402
    Target,
    fuzz_approvals,
    fuzz_arguments,
    fuzz_mcp,
    pending_approvals,
)
from tests.gateway.fuzz.wire import Sent, send  # noqa: E402
from tests.support.db import TEST_SECRET_KEY  # noqa: E402
from tests.support.gateway import Gateway, run_gateway  # noqa: E402

STOP = threading.Event()


def _fuzz_round(target: Target, examples: int, round_number: int) -> list[str]:
    """One round of every run, with fresh random cases; the violations found (each
    printed with the blob that reproduces it)."""
    config = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
    )
    known = pending_approvals(target, 8, first_order=1 + 100 * round_number)
    runs: list[tuple[str, Callable[[], None]]] = [
        ("mcp legacy", partial(fuzz_mcp, target, "legacy", config)),
        ("mcp modern", partial(fuzz_mcp, target, "modern", config)),
        ("arguments legacy", partial(fuzz_arguments, target, "legacy", config)),
        ("arguments modern", partial(fuzz_arguments, target, "modern", config)),
        ("approvals", partial(fuzz_approvals, target, known, config)),
    ]
    violations = []
    for name, run in runs:
        if STOP.is_set():
            break
        try:
            run()
        except Exception as exc:  # a violation (or several): report, go on
            text = "".join(traceback.format_exception(exc))
            print(f"\n=== violation in {name} (round {round_number}) ===\n{text}", flush=True)
            violations.append(f"{name}: {type(exc).__name__}")
    return violations


def _fuzz(target: Target, gateway: Gateway, args: argparse.Namespace) -> int:
    started = time.monotonic()
    start_rss, _ = worker_rss_mib(gateway.process.pid)
    violations: list[str] = []
    rounds = 0
    while not STOP.is_set() and (rounds == 0 or time.monotonic() - started < args.duration):
        violations += _fuzz_round(target, args.examples, rounds)
        rounds += 1
        total = sum(target.outcomes.values())
        rss, peak = worker_rss_mib(gateway.process.pid)
        print(
            f"round {rounds}: {total} cases, {time.monotonic() - started:.0f} s, "
            f"RSS {rss:.0f} MiB (peak {peak:.0f})",
            flush=True,
        )
    elapsed = time.monotonic() - started
    alive = gateway.process.poll() is None
    healthz = send(target.port, Sent("GET", "/healthz", (), b"")).status if alive else 0
    rss, peak = worker_rss_mib(gateway.process.pid) if alive else (0.0, 0.0)
    print(f"\n{'count':>7}  outcome")
    for outcome, count in sorted(target.outcomes.items()):
        print(f"{count:7d}  {outcome}")
    total = sum(target.outcomes.values())
    print(f"\n{total} cases in {rounds} rounds, {elapsed:.0f} s ({total / elapsed:.0f}/s)")
    print(f"violations: {len(violations)} {violations}")
    print(f"gateway alive: {alive}, /healthz: {healthz}")
    print(
        f"worker RSS: {start_rss:.0f} MiB at start, {rss:.0f} at the end, peak {peak:.0f} "
        f"(bound {MAX_WORKER_RSS_MIB})"
    )
    tracebacks = gateway.log().count("Traceback")
    print(f"tracebacks in the gateway's log: {tracebacks}")
    ok = not violations and alive and healthz == 200 and peak < MAX_WORKER_RSS_MIB
    return 0 if ok and not tracebacks else 1


async def main(args: argparse.Namespace) -> int:
    server, name, url = create_database("fuzz")
    workdir = Path(tempfile.mkdtemp(prefix="crank-fuzz-"))
    try:
        token = await admin_token(url, TEST_SECRET_KEY)
        app = create_app(Settings(database_url=url, secret_key=TEST_SECRET_KEY))
        with serve_echo() as echo:
            async with AsyncTestClient(app=app) as client:
                keys = await seed(client, token, echo.port)
            env = gateway_env(echo.port) | {"CRANK_LOG_LEVEL": "warning"}
            async with run_gateway(url, workdir, extra_env=env) as gateway:
                target = Target(gateway.port, keys, echo)
                # The cases block; the event loop has nothing else to do meanwhile.
                try:
                    return await asyncio.to_thread(_fuzz, target, gateway, args)
                except BaseException:  # Ctrl-C: the thread stops after its current run
                    STOP.set()
                    raise
    finally:
        drop_database(server, name)
        print(f"gateway log: {workdir}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--examples", type=int, default=500, help="cases per run per round")
    parser.add_argument("--duration", type=float, default=300.0, help="seconds, at least")
    sys.exit(asyncio.run(main(parser.parse_args())))
