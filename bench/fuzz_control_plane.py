"""Schemathesis against a real control plane, for as long as you like.

    .venv/bin/python bench/fuzz_control_plane.py [--cases 200 | --duration 300]
        [--roles owner,editor,viewer,stranger,admin] [--stateful 50] [--seed 1]

Issue 15. Needs a PostgreSQL (``CRANK_BENCH_DATABASE_URL``, default the local
server); the bench creates and drops its own database, and starts the control
plane as a real process (granian, one worker) on loopback.

The control plane's own OpenAPI document generates the requests
(tests/support/api_fuzz.py): every route and method, as each role, in positive
and negative mode, ``--cases`` per route, role and mode (or as many as fit in
``--duration`` seconds, spread over the routes), then ``--stateful`` runs of
schemathesis's state machine as the instance admin, each run in a new
workspace. Checks: no 5xx, status code, content type, response schema and
response headers as documented. Routes that make outbound calls are excluded
(listed at the start).

Prints one line per route (cases, failures, statuses), then every failure, and
exits 1 if there was one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.harness import database_server  # noqa: E402
from tests.support.api_fuzz import (  # noqa: E402
    EXCLUDED,
    ROLES,
    Caller,
    RouteTally,
    Target,
    fuzz_route,
    load_schema,
    make_callers,
    operations,
    route_name,
    run_stateful,
    seed,
    summary,
)
from tests.support.control_plane_server import serve_control_plane  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--cases", type=int, default=50, help="cases per route, role and mode")
    budget.add_argument("--duration", type=float, help="seconds in all, spread over the routes")
    parser.add_argument(
        "--roles", default=",".join(ROLES), help="comma-separated: " + ",".join(ROLES)
    )
    parser.add_argument("--stateful", type=int, default=20, help="state machine runs (0: none)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    roles = [role for role in args.roles.split(",") if role]
    unknown = set(roles) - set(ROLES)
    if unknown:
        parser.error(f"unknown roles: {', '.join(sorted(unknown))}")

    workspace = "fuzz"
    with (
        tempfile.TemporaryDirectory() as logs,
        serve_control_plane(database_server(), Path(logs), f"crank_fuzz_{os.getpid()}") as server,
    ):
        admin = Caller("admin", server.admin_token)
        schema = load_schema(server.url)
        known = seed(server.url, workspace, admin, schema)
        target = Target(server.url, workspace, known)
        people = asyncio.run(
            make_callers(server.database_url, server.admin_token, workspace, roles)
        )
        routes = list(operations(schema))
        for (method, path), why in EXCLUDED.items():
            print(f"excluded: {method} {path}: {why}")
        print(f"{len(routes)} routes x {len(people)} roles x 2 modes; seed {args.seed}")
        tallies: dict[str, RouteTally] = {route_name(route): RouteTally() for route in routes}
        started = time.monotonic()
        for index, route in enumerate(routes):
            tally = tallies[route_name(route)]
            target.known.update(seed(server.url, workspace, admin, schema))  # undo DELETEs
            if args.duration is None:
                for caller in people:
                    fuzz_route(
                        route, target, caller, tally, max_examples=args.cases, seed_value=args.seed
                    )
            else:
                # An equal share of the time left per route; rounds of a few cases per
                # role, each round with the next seed, until the share is spent.
                share = (args.duration - (time.monotonic() - started)) / (len(routes) - index)
                deadline = time.monotonic() + share
                rounds = 0
                while time.monotonic() < deadline or rounds == 0:
                    for caller in people:
                        fuzz_route(
                            route,
                            target,
                            caller,
                            tally,
                            max_examples=3,
                            seed_value=args.seed + rounds,
                        )
                    rounds += 1
            print(
                f"  {time.monotonic() - started:6.0f} s  {tally.cases:6d}  {route_name(route)}",
                flush=True,
            )
        stateful_failures: list[str] = []
        if args.stateful:
            stateful_failures = run_stateful(schema, target, admin, args.stateful, steps=10)
        elapsed = time.monotonic() - started

    print(f"{'cases':>6}  {'fail':>4}  route  [status:count]")
    for line in summary(tallies):
        print(line)
    total = sum(t.cases for t in tallies.values())
    failures = [f"{route}: {f}" for route, t in sorted(tallies.items()) for f in t.failures]
    failures += [f"stateful: {f}" for f in stateful_failures]
    print(
        f"{total} cases in {elapsed:.0f} s ({total / max(elapsed, 1e-9):.0f}/s), "
        f"{args.stateful} stateful runs, {len(failures)} failures"
    )
    for failure in failures:
        print(f"FAIL {failure}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
