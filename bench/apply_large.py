"""``crank apply`` of a 10,000-operation file, end to end, against a baseline in the same run.

    .venv/bin/python bench/apply_large.py [--agents 100] [--per-agent 100] [--keep]

Issue 8. Needs a PostgreSQL (``CRANK_BENCH_DATABASE_URL``, default the local
server); the bench creates and drops its own database.

What it does:

1. Writes the operation file: ``--agents`` agents of ``--per-agent``
   operations each, every operation shaped like the demo's
   ``frankfurter_latest_rate`` (an input schema with patterns and
   descriptions, a GET request with query and headers, a response select
   and caps, ``execution_config``, ``safety``), names and descriptions
   varied so the linter's similar-tools rule has real work. Prints its size.
2. Migrates the new database, creates an admin token in process, and starts
   the control plane as a real process: granian serving
   ``control_plane.app:create_app``, default settings (one worker).
3. Runs, as subprocesses with ``CRANK_URL``/``CRANK_TOKEN``:
   - the **baseline**: a Python process that only reads and parses the same
     YAML file with PyYAML's C loader (the least the CLI must do);
   - ``crank apply -f FILE --publish`` into the empty workspace (creates and
     publishes everything);
   - the same command again: nothing changes (``no changes``);
   - ``crank apply -f FILE --dry-run``: the plan of the unchanged file.
   Each row's wall time, the process's peak RSS (GNU ``/usr/bin/time``'s
   ``%M``; ``apt install time``) and the ratio of its time to the baseline's.

Correctness: the first apply must exit 0 and print ``created N, updated 0,
published N+A``; the second must print ``no changes``. The table is printed
either way, with the exit code.

The machine is shared: the figures are provisional; the ratios to the baseline
measured in the same run are what to compare across machines.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.gateway_tools_call import free_port, stop  # noqa: E402
from bench.harness import drop_database  # noqa: E402
from control_plane.services.tokens import create_admin_token  # noqa: E402
from shared.crypto import KeyHasher  # noqa: E402
from shared.db import connect  # noqa: E402
from shared.migrate import migrate  # noqa: E402

WORKSPACE = "bench"
TARGET_S = 15.0  # issue 8: the first apply with --publish, end to end
TARGET_RSS_MB = 150.0  # issue 8: the CLI's peak RSS
TIME = "/usr/bin/time"  # GNU time (apt install time): a child's own peak RSS

_VERBS = ["get", "list", "find", "count", "show", "fetch", "lookup", "search", "read", "check"]
_NOUNS = [
    "invoice", "payment", "customer", "order", "refund", "shipment", "product", "coupon",
    "ticket", "account",
]  # fmt: skip
_WORDS = [
    "amount",
    "balance",
    "currency",
    "status",
    "history",
    "detail",
    "region",
    "owner",
    "partner",
    "contract",
    "supplier",
    "warehouse",
    "carrier",
    "tariff",
    "ledger",
    "budget",
    "forecast",
    "quota",
    "schedule",
    "discount",
    "rating",
    "review",
    "address",
    "profile",
    "segment",
    "channel",
    "campaign",
    "voucher",
    "subscription",
    "plan",
    "usage",
    "limit",
    "period",
    "country",
    "market",
    "branch",
    "team",
    "project",
    "milestone",
    "asset",
    "license",
    "device",
    "sensor",
    "reading",
    "event",
]


def operation_yaml(name: str, rng: random.Random, index: int) -> str:
    """One operation in the demo's shape, block style outside and flow style inside."""
    t = rng.sample(_WORDS, 5)
    f = rng.sample(_WORDS, 2)
    return (
        f"- name: {name}\n"
        f"  description: Gets the {t[0]} and {t[1]} of a {t[2]}. Use when the user asks "
        f"about {t[3]} or {t[4]}. Returns {f[0]} and {f[1]}.\n"
        "  input: {type: object, properties: {"
        f'id: {{type: string, pattern: "^[a-z0-9_]{{1,32}}$", description: The {t[2]} id}}, '
        'cur: {type: string, pattern: "^[A-Z]{3}$", description: ISO 4217 code}}, '
        "required: [id], additionalProperties: false}\n"
        f'  request: {{method: GET, url: "https://api.example.com/v{1 + index % 3}/{t[2]}/{{id}}", '
        "query: {currency: cur}}\n"
        f'  response: {{select: "{{{f[0]}: {f[0]}, {f[1]}: {f[1]}}}", max_items: 50}}\n'
        "  execution_config: {timeout_ms: 10000, retries: 2}\n"
        "  safety: {approval: false, confirmation: auto}\n"
    )


def write_file(path: Path, agents: int, per_agent: int) -> int:
    """The operation file; returns the number of operations."""
    rng = random.Random(8)  # noqa: S311 - test data, not a secret
    operations: list[str] = []
    agent_lines: list[str] = []
    for a in range(agents):
        names = []
        for i in range(per_agent):
            verb, noun = _VERBS[i % len(_VERBS)], _NOUNS[i // len(_VERBS) % len(_NOUNS)]
            name = f"svc{a:03d}_{verb}_{noun}_{_WORDS[i % len(_WORDS)]}"
            names.append(name)
            operations.append(operation_yaml(name, rng, a * per_agent + i))
        agent_lines.append(
            f"- slug: service-{a:03d}\n  title: Service {a}\n"
            f"  description: The tools of service {a}.\n"
            f"  operations: [{', '.join(names)}]\n"
        )
    text = "operations:\n" + "".join(operations) + "agents:\n" + "".join(agent_lines)
    path.write_text(text, encoding="utf-8")
    return len(operations)


@dataclass(frozen=True, slots=True)
class Measured:
    label: str
    seconds: float
    rss_mb: float
    exit_code: int
    output: str


def measure(label: str, argv: list[str], env: dict[str, str], log: Path) -> Measured:
    """Run ``argv`` to the end under ``/usr/bin/time``; its wall time and peak RSS.

    Not ``os.wait4`` on a child of this process: Linux carries the RSS high-water
    mark of the forking process over ``exec``, so a child of the bench (tens of
    MB of imports) would report at least the bench's size. ``time`` is small.
    """
    rss_file = log.with_suffix(".rss")
    with log.open("wb") as out:
        started = time.perf_counter()
        done = subprocess.run(
            [TIME, "-f", "%M", "-o", str(rss_file), *argv],
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )
        seconds = time.perf_counter() - started
    rss_kib = int(rss_file.read_text().split()[-1])
    return Measured(
        label, seconds, rss_kib / 1024, done.returncode, log.read_text(errors="replace")
    )


def start_control_plane(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "granian", "--interface", "asgi", "--factory", "--no-ws"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"]
    argv += ["--no-access-log", "control_plane.app:create_app"]
    with log.open("wb") as out:
        # Own session: the whole group (granian's worker included) is signalled on cleanup.
        return subprocess.Popen(
            argv, env=env, cwd=ROOT, stdout=out, stderr=out, start_new_session=True
        )


def http(method: str, url: str, token: str | None = None, body: bytes | None = None) -> int:
    request = urllib.request.Request(url, data=body, method=method)  # noqa: S310 - loopback
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    if body is not None:
        request.add_header("Content-Type", "application/json")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=10) as response:
        return int(response.status)


def wait_up(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the control plane exited:\n{log.read_text()[-3000:]}")
        try:
            if http("GET", f"{url}/readyz") == 200:
                return
        except OSError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"the control plane did not come up:\n{log.read_text()[-3000:]}")


def last_line(output: str) -> str:
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


async def seed(url: str, secret_key: str) -> str:
    await migrate(url)
    async with await connect(url) as conn:
        token = (
            await create_admin_token(conn, KeyHasher(secret_key), name="bench", role="admin")
        ).token
        await conn.commit()
    return token


def run(args: argparse.Namespace) -> int:
    import asyncio

    server = os.environ.get(
        "CRANK_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )
    name = f"crank_bench_apply_{os.getpid()}"
    workdir = Path(tempfile.mkdtemp(prefix="crank-bench-apply-"))
    path = workdir / "operations.yaml"
    count = write_file(path, args.agents, args.per_agent)
    size = path.stat().st_size
    print(f"file: {path}: {count} operations, {args.agents} agents, {size / 1e6:.2f} MB")

    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(server)
    params["dbname"] = name
    url = make_conninfo(**params)  # type: ignore[arg-type]
    secret_key = secrets.token_urlsafe(32)
    process: subprocess.Popen[bytes] | None = None
    try:
        token = asyncio.run(seed(url, secret_key))
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
        env |= {"PYTHONPATH": str(ROOT)}
        server_env = env | {
            "CRANK_DATABASE_URL": url,
            "CRANK_SECRET_KEY": secret_key,
            "CRANK_LOG_LEVEL": "warning",
        }
        process = start_control_plane(server_env, port, workdir / "control-plane.log")
        wait_up(base, process, workdir / "control-plane.log")
        http("POST", f"{base}/api/v1/workspaces", token, f'{{"slug":"{WORKSPACE}"}}'.encode())

        cli_env = env | {"CRANK_URL": base, "CRANK_TOKEN": token}
        crank = [sys.executable, "-m", "control_plane.cli"]
        apply = [*crank, "apply", "-f", str(path), "--workspace", WORKSPACE]
        parse = [
            sys.executable,
            "-c",
            "import sys, yaml; yaml.load(open(sys.argv[1], 'rb'), Loader=yaml.CSafeLoader)",
            str(path),
        ]
        runs = [
            ("baseline: parse the YAML (C loader)", parse, "parse"),
            ("apply --publish (empty workspace)", [*apply, "--publish"], "first"),
            ("apply --publish again (no change)", [*apply, "--publish"], "second"),
            ("apply --dry-run (no change)", [*apply, "--dry-run"], "dry"),
        ]
        rows = [measure(label, argv, cli_env, workdir / f"{log}.log") for label, argv, log in runs]
    finally:
        if process is not None:
            stop(process)
        if not args.keep:
            drop_database(server, name)

    baseline = rows[0].seconds
    print()
    print(f"{'run':36} {'wall s':>7} {'x base':>7} {'RSS MB':>7} {'exit':>4}  last line")
    for row in rows:
        print(
            f"{row.label:36} {row.seconds:7.2f} {row.seconds / baseline:7.1f} "
            f"{row.rss_mb:7.0f} {row.exit_code:4d}  {last_line(row.output)[:90]}"
        )
    first, second = rows[1], rows[2]
    published = count + args.agents
    ok = (
        first.exit_code == 0
        and f"created {count + args.agents}, updated 0, published {published}" in first.output
        and second.exit_code == 0
        and "no changes" in second.output
    )
    print()
    print(
        f"targets: first apply <= {TARGET_S:g} s: {first.seconds:.1f} s; "
        f"CLI peak RSS < {TARGET_RSS_MB:g} MB: {max(r.rss_mb for r in rows[1:]):.0f} MB; "
        f"outputs as expected: {'yes' if ok else 'NO'}"
    )
    if args.keep:
        print(f"kept: database {name}, files in {workdir}")
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--agents", type=int, default=100)
    parser.add_argument("--per-agent", type=int, default=100)
    parser.add_argument("--keep", action="store_true", help="keep the database and the files")
    sys.exit(run(parser.parse_args()))


if __name__ == "__main__":
    main()
