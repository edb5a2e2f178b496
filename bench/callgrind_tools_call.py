"""Instructions per tools/call, counted by callgrind: where the gateway's own time goes.

    .venv/bin/python bench/callgrind_tools_call.py [--calls 300] [--concurrency 16]
        [--era legacy|modern] [--loop asyncio|uvloop] [--auth key|token|both]
        [--baseline-tree PATH] [--repeat 1] [--no-valgrind] [--keep-profiles]

Wall time on a shared machine moves from run to run; the number of
instructions a piece of code executes hardly does (two runs of the same code
differ by about 0.5 % on a quiet machine, 1-2 % on a loaded one, where the
timers and loop wake-ups counted grow with the stretched wall time:
``--repeat`` takes the least of several), so this is the figure to compare
two versions of the hot path by, run by run (docs/performance.md, "Where the
time goes").

Set-up: the database and the ``latest_rate`` operation of
bench/gateway_tools_call.py, its upstream (bench/rates_upstream.py under
granian, on the second CPU). Then this script runs itself again under
``valgrind --tool=callgrind --instr-atstart=no`` (the *inner* run): it builds
the gateway's ASGI app in process (no granian: the server's own work is not
counted), runs the app's lifespan, sends ``--warm-up`` calls, switches
instrumentation on with ``callgrind_control -i on``, sends ``--calls`` calls
``--concurrency`` at a time straight into the app, switches it off and checks
that every answer was a successful tool result. The outer run reads the
total from callgrind's output and prints instructions per call.

``--auth`` picks the bearer: ``key`` (the agent key, the default), ``token``
(an access token of an identity provider) or ``both``: one inner run each,
key first, on the same database, catalog and settings, then key and token
instructions per call and their ratio, judged against issue 28's budget (a
call with a cached valid JWT at most 5 % above a key's). For tokens the bench
starts bench/loopback_idp.py (OpenID metadata and a JWKS on loopback, from a
thread of the outer run), the workspace trusts it and the agent takes its
tokens with scope ``rates:read`` (admin API, as the rest of the seed); the
gateway runs with ``CRANK_PUBLIC_URL`` set to the driver's own URL and
``CRANK_ALLOW_LOOPBACK_UPSTREAMS=true`` (the IdP's documents go through the
SSRF guard). The token is RFC 9068 (``typ: at+jwt``, RS256, ``aud`` the
agent's canonical URL, an hour ahead); the warm-up's first call fetches the
metadata and keys and validates it, so the measured calls are cached-token
calls. ``--repeat N`` makes N inner runs per mode (and tree), the order of the
modes alternating, and uses the least per call of each: whatever else a run
counts (timers, loop wake-ups) only adds. ``--keep-profiles`` keeps each
run's callgrind output for ``callgrind_annotate``.

``--baseline-tree PATH`` measures a second checkout's gateway code too (e.g.
``git worktree add /tmp/base <commit>``), with the same database, upstream,
IdP and bearers: its inner runs put that tree first on the path (this tree's
bench package stays) and check that ``mcp_gateway`` came from it. It prints
this tree / baseline per mode: a change to the hot path, before and after in
one run. The database is migrated and seeded by this tree's code.

Needs valgrind (``apt install valgrind``), taskset and a PostgreSQL
(``CRANK_BENCH_DATABASE_URL``, default the local server). ``--no-valgrind``
runs the inner part without callgrind (a quick check that it works).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import bench  # noqa: E402, F401 - this tree's benches, whichever tree the code under test is

if CODE_TREE := os.environ.get("CRANK_BENCH_CODE_TREE"):
    # An inner run of --baseline-tree: mcp_gateway, shared and control_plane from that
    # checkout (first on the path); bench.* stays this tree's (its package is imported).
    sys.path.insert(0, CODE_TREE)

from bench.gateway_tools_call import (  # noqa: E402
    LEGACY_VERSION,
    MODERN_VERSION,
    TOOL,
    call_body,
    free_port,
    initialize_message,
    seed,
    serve,
    stop,
    tree_commit,
    wait_up,
)
from bench.harness import SECRET, create_database, drop_database  # noqa: E402
from bench.loopback_idp import LoopbackIdp  # noqa: E402

PATH = "/mcp/v1/bench/rates"
PUBLIC_URL = "http://127.0.0.1:8080"  # the Driver's server: CRANK_PUBLIC_URL in token runs
TOKEN_BUDGET = 1.05  # issue 28: a cached token's call at most 5 % above a key's
_TOTAL = re.compile(rb"^totals:\s+(\d+)", re.MULTILINE)  # "summary:" is 0 with --instr-atstart=no


class Driver:
    """Sends requests straight into an ASGI app, as granian would, without a socket."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def lifespan(self, phase: str) -> None:
        sent = asyncio.Queue[dict[str, Any]]()
        events = [{"type": f"lifespan.{phase}"}]

        async def receive() -> dict[str, Any]:
            if events:
                return events.pop()
            await asyncio.Event().wait()  # the app waits for the next event forever
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            await sent.put(message)

        task = asyncio.create_task(self.app({"type": "lifespan"}, receive, send))
        message = await sent.get()
        if message["type"] != f"lifespan.{phase}.complete":
            raise RuntimeError(f"lifespan {phase}: {message}")
        task.cancel()

    async def post(self, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, str], bytes]:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": PATH,
            "raw_path": PATH.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
            "client": ("127.0.0.1", 40000),
            "server": ("127.0.0.1", 8080),
        }
        delivered = False
        status = 0
        answer_headers: dict[str, str] = {}
        chunks: list[bytes] = []

        async def receive() -> dict[str, Any]:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.Event().wait()
            raise AssertionError("unreachable")

        async def send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                answer_headers.update(
                    (k.decode().lower(), v.decode()) for k, v in message.get("headers", [])
                )
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))

        await self.app(scope, receive, send)
        return status, answer_headers, b"".join(chunks)


async def _headers(driver: Driver, key: str, era: str) -> dict[str, str]:
    headers = {
        "authorization": f"Bearer {key}",
        "content-type": "application/json",
        "accept": "application/json",
        "host": "127.0.0.1:8080",
    }
    if era == "modern":
        return headers | {
            "mcp-protocol-version": MODERN_VERSION,
            "mcp-method": "tools/call",
            "mcp-name": TOOL,
        }
    status, answer, raw = await driver.post(headers, initialize_message())
    if status != 200:
        raise RuntimeError(f"initialize: HTTP {status} {raw[:300]!r}")
    return headers | {
        "mcp-session-id": answer["mcp-session-id"],
        "mcp-protocol-version": LEGACY_VERSION,
    }


async def _calls(driver: Driver, headers: dict[str, str], body: bytes, n: int, c: int) -> None:
    semaphore = asyncio.Semaphore(c)

    async def one() -> None:
        async with semaphore:
            status, _, raw = await driver.post(headers, body)
        result = msgspec.json.decode(raw).get("result") if status == 200 else None
        if not isinstance(result, dict) or result.get("isError") is not False:
            raise RuntimeError(f"tools/call failed: HTTP {status} {raw[:300]!r}")

    await asyncio.gather(*(one() for _ in range(n)))


def _instrument(on: bool) -> None:
    if os.environ.get("CRANK_BENCH_UNDER_VALGRIND") == "1":
        subprocess.run(
            ["callgrind_control", "-i", "on" if on else "off", str(os.getpid())],
            check=True,
            capture_output=True,
        )


async def inner(args: argparse.Namespace) -> None:
    from mcp_gateway.app import create_app
    from shared.settings import load_settings

    driver = Driver(create_app(load_settings()))
    await driver.lifespan("startup")
    try:
        headers = await _headers(driver, os.environ["CRANK_BENCH_BEARER"], args.era)
        body = call_body(args.era == "modern").encode()
        await _calls(driver, headers, body, args.warm_up, args.concurrency)
        started = time.perf_counter()
        _instrument(True)
        await _calls(driver, headers, body, args.calls, args.concurrency)
        _instrument(False)
        wall = time.perf_counter() - started
        print(f"inner {args.auth}: {args.calls} calls in {wall:.2f} s of wall time", flush=True)
    finally:
        await driver.lifespan("shutdown")


def outer(args: argparse.Namespace) -> int:
    if not args.no_valgrind and shutil.which("valgrind") is None:
        print("valgrind is not installed (apt install valgrind)", file=sys.stderr)
        return 2
    tree = args.baseline_tree.resolve() if args.baseline_tree else None
    if tree is not None:
        if not (tree / "mcp_gateway" / "app.py").is_file():
            print(f"--baseline-tree {tree}: no mcp_gateway/app.py there", file=sys.stderr)
            return 2
        print(f"this tree {ROOT} at {tree_commit(ROOT)}; baseline {tree} at {tree_commit(tree)}")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # the seeding's requests
    modes = ["key", "token"] if args.auth == "both" else [args.auth]
    server, name, url = create_database("callgrind")
    directory = Path(tempfile.mkdtemp(prefix="crank-bench-callgrind-"))
    upstream_port = free_port()
    upstream = serve(
        1,
        "bench.rates_upstream:app",
        upstream_port,
        dict(os.environ),
        factory=False,
        log=directory / "upstream.log",
    )
    with contextlib.ExitStack() as stack:
        try:
            asyncio.run(
                wait_up(
                    f"http://127.0.0.1:{upstream_port}/_count", upstream, directory / "upstream.log"
                )
            )
            env = os.environ | {
                "CRANK_SECRET_KEY": SECRET,
                "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream_port}",
                "CRANK_RATE_LIMIT": "off",
                "CRANK_LOG_LEVEL": "warning",
                "CRANK_METRICS_PORT": str(free_port()),
            }
            bearers: dict[str, str] = {}
            idp: LoopbackIdp | None = None
            if "token" in modes:
                # Every mode of the run shares the catalog and settings: the agent takes
                # the IdP's tokens and keys alike, so the bearer is the only difference.
                idp = stack.enter_context(LoopbackIdp())
                env |= {
                    "CRANK_PUBLIC_URL": PUBLIC_URL,  # the audience tokens must name
                    "CRANK_ALLOW_LOOPBACK_UPSTREAMS": "true",  # the IdP is on loopback too
                }
                bearers["token"] = idp.token(PUBLIC_URL + PATH)
            bearers["key"] = asyncio.run(
                seed(url, upstream_port, idp.issuer if idp is not None else None)
            )
            env["CRANK_DATABASE_URL"] = url
            trees = {"this tree": ROOT} | ({"baseline": tree} if tree is not None else {})
            runs: dict[tuple[str, str], list[float]] = {}
            for repeat in range(args.repeat):
                for label, code in trees.items():
                    # Alternate the order, so a drift of the machine favours no mode.
                    for mode in modes if repeat % 2 == 0 else modes[::-1]:
                        run_env = env | (
                            {"CRANK_BENCH_CODE_TREE": str(code)} if code != ROOT else {}
                        )
                        tag = label if args.repeat == 1 else f"{label} {repeat + 1}"
                        found = _measure(args, mode, bearers[mode], run_env, directory, tag)
                        if found is None:
                            return 1
                        runs.setdefault((label, mode), []).append(found)
            # The fewest: whatever else a run counted (timers, loop wake-ups) only adds.
            per_call = {run: min(found) for run, found in runs.items()}
            if args.repeat > 1 and not args.no_valgrind:
                for (label, mode), found in runs.items():
                    spread = (max(found) - min(found)) / min(found) * 100
                    print(
                        f"{label}, {mode}: {', '.join(f'{f / 1e6:.3f}' for f in found)} M/call "
                        f"(spread {spread:.1f} %; the least is used)"
                    )
            if idp is not None:
                print(f"IdP documents served (whole run): {idp.served}")
            if not args.no_valgrind:
                _summary(per_call, trees, modes)
            return 0
        finally:
            stop(upstream)
            drop_database(server, name)
            shutil.rmtree(directory, ignore_errors=True)


def _summary(
    per_call: dict[tuple[str, str], float], trees: dict[str, Path], modes: list[str]
) -> None:
    """Token over key per tree (issue 28's budget), and each tree over the baseline."""
    for label in trees:
        if len(modes) == 2:
            key, token = per_call[(label, "key")], per_call[(label, "token")]
            ratio = token / key
            verdict = "met" if ratio <= TOKEN_BUDGET else "MISSED"
            print(
                f"{label}: key {key / 1e6:.3f} M/call, token {token / 1e6:.3f} M/call: "
                f"token / key = {ratio:.4f} ({(ratio - 1) * 100:+.1f} %; "
                f"{verdict}: <= {TOKEN_BUDGET:g})"
            )
    if "baseline" in trees:
        for mode in modes:
            ours, base = per_call[("this tree", mode)], per_call[("baseline", mode)]
            print(
                f"{mode}: this tree / baseline = {ours / base:.4f} "
                f"({(ours - base) / 1e3:+.1f} k instructions per call)"
            )


def _measure(
    args: argparse.Namespace,
    mode: str,
    bearer: str,
    env: dict[str, str],
    directory: Path,
    label: str,
) -> float | None:
    """One inner run with ``bearer``: instructions per call (0 without valgrind), or
    None after printing why it failed."""
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--inner",
        "--auth",
        mode,
        "--era",
        args.era,
        "--loop",
        args.loop,
        "--calls",
        str(args.calls),
        "--warm-up",
        str(args.warm_up),
        "--concurrency",
        str(args.concurrency),
    ]
    env = env | {"CRANK_BENCH_BEARER": bearer}  # not in argv: ps would show it
    tag = f"{mode}-{label.replace(' ', '-')}"
    out = directory / f"callgrind-{tag}.out"
    if not args.no_valgrind:
        env["CRANK_BENCH_UNDER_VALGRIND"] = "1"
        argv = [
            "valgrind",
            "--tool=callgrind",
            "--instr-atstart=no",
            f"--callgrind-out-file={out}",
            *argv,
        ]
    argv = ["taskset", "-c", "0", *argv]
    done = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, check=False)
    print(done.stdout, end="")
    if done.returncode != 0:
        print(done.stderr[-3000:], file=sys.stderr)
        return None
    if args.no_valgrind:
        return 0.0
    found = _TOTAL.search(out.read_bytes())
    if found is None:
        print(f"no total in {out}", file=sys.stderr)
        return None
    if args.keep_profiles:
        kept = Path(tempfile.gettempdir()) / f"crank-callgrind-{tag}-{os.getpid()}.out"
        shutil.copy(out, kept)
        print(f"profile kept: {kept} (callgrind_annotate {kept})")
    total = int(found.group(1))
    print(
        f"{label}, {mode}: {args.era}, loop {args.loop}, "
        f"{args.calls} calls {args.concurrency} at a time: "
        f"{total:,} instructions, {total / args.calls / 1e6:.3f} M per call",
        flush=True,
    )
    return total / args.calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--warm-up", type=int, default=50)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--era", choices=("legacy", "modern"), default="legacy")
    parser.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio")
    parser.add_argument(
        "--auth",
        choices=("key", "token", "both"),
        default="key",
        help="bearer of the calls: an agent key, an IdP's access token, or both in one run",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="inner runs per tree and mode, order alternating; the least per call is used",
    )
    parser.add_argument("--no-valgrind", action="store_true", help="run without callgrind")
    parser.add_argument(
        "--keep-profiles", action="store_true", help="copy each callgrind.out to the temp dir"
    )
    parser.add_argument(
        "--baseline-tree",
        type=Path,
        metavar="PATH",
        help="also measure the gateway code of this checkout (e.g. git worktree add /tmp/base "
        "<commit>), same database and bearers, and print this tree / baseline",
    )
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.repeat < 1 or args.calls < 1 or args.concurrency < 1:
        parser.error("--repeat, --calls and --concurrency take 1 or more")
    if not args.inner:
        return outer(args)
    if CODE_TREE:
        import mcp_gateway

        if not Path(mcp_gateway.__file__).resolve().is_relative_to(Path(CODE_TREE).resolve()):
            raise RuntimeError(f"the baseline imports {mcp_gateway.__file__}, not {CODE_TREE}")
    if args.loop == "uvloop":
        import uvloop  # not a dependency: install it into the venv to compare loops

        uvloop.run(inner(args))
    else:
        asyncio.run(inner(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
