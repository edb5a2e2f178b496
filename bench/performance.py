"""Every performance figure of Crank, in one run on one machine.

    .venv/bin/python bench/performance.py [--quick] [--only NAME[,NAME...]]

Runs, one after the other (never side by side: each pins its servers to a
CPU and would disturb the next), the benchmark scripts of this folder and
prints their tables as they come:

- ``tools_call``: bench/gateway_tools_call.py: tools/call against a direct call,
  a bare proxy and FastMCP, at 1, 16 and 64 connections, both protocol eras;
- ``tools_list``: bench/gateway_tools_list.py: tools/list of a 128-tool agent
  and initialize, against a bare ASGI app;
- ``catalog``: bench/catalog_scale.py: 10,000 operations in 100 agents:
  start, memory, reloads under load, publish → visible on two replicas;
- ``apply``: bench/apply_large.py: ``crank apply`` of a 10,000-operation file;
- ``approvals``: bench/approvals_throughput.py: approved calls executed by
  two gateway processes;
- ``token_call``: bench/callgrind_tools_call.py ``--auth both``: instructions
  per tools/call with an agent key and with a cached access token, under
  callgrind (needs valgrind).

Every ratio a script prints is against a baseline it measured in the same run;
docs/performance.md says how to read each table and holds the last figures.
``--quick`` shortens every run (a smoke check of the scripts, not figures).
Exit status: the first script that failed, else 0.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# name -> (script, full-run arguments, --quick arguments)
SCRIPTS: dict[str, tuple[str, list[str], list[str]]] = {
    "tools_call": ("gateway_tools_call.py", [], ["--seconds", "2", "--connections", "1,16"]),
    "tools_list": ("gateway_tools_list.py", [], ["--seconds", "2"]),
    "catalog": (
        "catalog_scale.py",
        [],
        ["--workspaces", "2", "--agents", "5", "--tools", "20", "--seconds", "3"],
    ),
    "apply": ("apply_large.py", [], ["--agents", "10", "--per-agent", "20"]),
    "approvals": ("approvals_throughput.py", [], ["--approvals", "300", "--seconds", "2"]),
    "token_call": (
        "callgrind_tools_call.py",
        ["--auth", "both"],
        ["--auth", "both", "--calls", "30", "--warm-up", "10"],
    ),
}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="short runs: check the scripts work")
    parser.add_argument("--only", default="", help=f"comma-separated, of: {', '.join(SCRIPTS)}")
    args = parser.parse_args()
    names = [n.strip() for n in args.only.split(",") if n.strip()] or list(SCRIPTS)
    unknown = set(names) - set(SCRIPTS)
    if unknown:
        parser.error(f"unknown: {', '.join(sorted(unknown))}")
    print(f"machine: {os.cpu_count()} CPUs, {platform()}; started {time.strftime('%F %T %Z')}")
    failed = 0
    for name in names:
        script, full, quick = SCRIPTS[name]
        argv = [sys.executable, str(ROOT / "bench" / script), *(quick if args.quick else full)]
        print(f"\n=== {name}: {' '.join(argv[1:])}", flush=True)
        started = time.monotonic()
        code = subprocess.run(argv, cwd=ROOT, check=False).returncode
        print(f"=== {name}: exit {code} after {time.monotonic() - started:.0f} s", flush=True)
        if code and not failed:
            failed = code
    return failed


def platform() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


if __name__ == "__main__":
    sys.exit(main())
