"""``crank up``: everything for a local run, in one command, stopped by one Ctrl-C.

1. The dev state file (0600): a generated ``CRANK_SECRET_KEY``, the dev admin
   token and the demo keys, kept across runs.
2. The database: ``CRANK_DATABASE_URL`` when set, else the embedded
   PostgreSQL 18 under the data directory.
3. Migrations, the dev admin token, the demo seed (only the demo objects that
   are missing and were never seeded: a user's change survives a restart),
   the demo keys of the demo agents that exist.
4. Child processes: the demo sales API on loopback, the control plane and
   the MCP gateway, with the demo sales API allowlisted by
   address (``CRANK_UPSTREAM_ALLOWLIST``). Served on loopback, loopback
   upstreams are open to every workspace (``CRANK_ALLOW_LOOPBACK_UPSTREAMS``);
   other private upstreams stay refused unless ``CRANK_ALLOW_PRIVATE_UPSTREAMS``
   is set.
5. The banner (URLs, token, keys, curl lines) once the servers answer.

SIGINT and SIGTERM stop the children and the embedded PostgreSQL; a child
that exits on its own stops everything too (exit code 1).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import ipaddress
import os
import signal
import socket
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

import msgspec
import structlog

from control_plane.cli.banner import client_host
from control_plane.cli.banner import render as render_banner
from control_plane.cli.common import CliError, cli_settings
from control_plane.cli.devdb import embedded_postgres
from control_plane.cli.devkeys import DEMO_KEYS, ensure_admin_token, ensure_api_key
from control_plane.cli.devstate import (
    LOCK_FILE,
    DevState,
    data_dir,
    dev_state_path,
    load_or_create_dev_state,
    save_dev_state,
)
from control_plane.cli.runtime import ChildFailed, Supervisor
from control_plane.cli.seed import DemoSeed, ensure_workspace, seed_demo
from control_plane.cli.servers_cmd import control_plane_argv, gateway_argv
from control_plane.console.sessions import sign_in_link_for_token
from control_plane.demo import DEMO_WORKSPACE, demo_sales_port
from control_plane.services.agents import get_agent
from shared.crypto import KeyHasher
from shared.db import connect
from shared.logging import configure_logging
from shared.migrate import migrate
from shared.settings import Settings

log = structlog.get_logger(__name__)

UP_ACTOR = "crank up"
READY_TIMEOUT_S = 60.0
CONSOLE_LINK_TTL_S = 3600  # the banner's one-time console sign-in link


class Shutdown(BaseException):
    """SIGINT or SIGTERM arrived; unwinds whatever ``crank up`` is doing."""


def _raise_shutdown(signum: int, frame: FrameType | None) -> None:
    raise Shutdown(signal.Signals(signum).name)


def _ignore_while_stopping(signum: int, frame: FrameType | None) -> None:
    print("crank up: stopping, please wait...", file=sys.stderr, flush=True)


@contextlib.contextmanager
def _data_dir_lock(directory: Path) -> Iterator[None]:
    """One ``crank up`` per data directory (they would share one embedded server)."""
    with open(directory / LOCK_FILE, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise CliError(
                f"another `crank up` is running with data directory {directory}; stop it "
                "(Ctrl-C in its terminal), or run this one with another CRANK_DATA_DIR and "
                "free ports (CRANK_CONTROL_PLANE_PORT, CRANK_GATEWAY_PORT, "
                "CRANK_DEMO_SALES_PORT, CRANK_METRICS_PORT)"
            ) from None
        yield


def _check_port_free(host: str, port: int, variable: str) -> None:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as probe:
        # As the servers bind: connections of an earlier run in TIME_WAIT do not count.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError:
            raise CliError(
                f"port {port} on {host} is taken; choose another with {variable}"
            ) from None


@dataclass(frozen=True, slots=True)
class Prepared:
    admin_token: str
    keys: dict[tuple[str, str], str]  # (agent, kind) -> key
    console_code: str  # a one-time sign-in link's code, for the banner


async def _prepare(
    database_url: str, hasher: KeyHasher, state: DevState, sales_port: int
) -> Prepared:
    await migrate(database_url)
    async with await connect(database_url) as conn:
        token = await ensure_admin_token(conn, hasher, state.admin_token)
        seed = await seed_demo(conn, sales_port=sales_port, actor=UP_ACTOR)
        workspace = await ensure_workspace(conn, DEMO_WORKSPACE, UP_ACTOR)
        keys: dict[tuple[str, str], str] = {}
        for agent, kind in DEMO_KEYS:
            if await get_agent(conn, workspace.id, agent) is None:
                continue  # the user deleted this demo agent: no key for it
            saved = (state.agent_keys if kind == "agent" else state.approval_keys).get(agent)
            keys[agent, kind] = await ensure_api_key(
                conn, hasher, workspace, UP_ACTOR, agent=agent, kind=kind, saved=saved
            )
        console_code = await sign_in_link_for_token(conn, hasher, token, CONSOLE_LINK_TTL_S)
        assert console_code is not None  # ensure_admin_token has just registered it
        await conn.commit()
    _log_seed(seed)
    return Prepared(admin_token=token, keys=keys, console_code=console_code)


def _log_seed(seed: DemoSeed) -> None:
    if seed.created:
        log.info("demo_seeded", created=seed.created, kept=seed.kept, deleted=seed.deleted)
    else:
        log.info(
            "demo_seed_skipped",
            reason="every demo object exists or was deleted by you; the seed never changes them",
            kept=seed.kept,
            deleted=seed.deleted,
        )


def _child_env(
    settings: Settings,
    database_url: str,
    secret_key: str,
    sales_port: int,
    gateway_url: str = "",
) -> dict[str, str]:
    """The children's environment. The demo sales API on loopback is allowlisted
    by address; private upstreams in general stay as CRANK_ALLOW_PRIVATE_UPSTREAMS
    says (off unless the user turned it on). ``gateway_url`` becomes
    CRANK_PUBLIC_URL unless the user set one, so the console shows whole MCP
    endpoint URLs and webhooks link to the local gateway."""
    env = dict(os.environ)
    if gateway_url and not settings.public_url:
        env["CRANK_PUBLIC_URL"] = gateway_url
    allowlist = [*settings.upstream_allowlist, f"127.0.0.1:{sales_port}"]
    env.update(
        CRANK_DATABASE_URL=database_url,
        CRANK_SECRET_KEY=secret_key,
        CRANK_UPSTREAM_ALLOWLIST=",".join(dict.fromkeys(allowlist)),
        CRANK_DEMO_SALES_PORT=str(sales_port),
        # One gateway worker locally unless the user asks for more.
        CRANK_GATEWAY_WORKERS=str(settings.gateway_workers or 1),
    )
    # Served on loopback, only this machine's user reaches Crank: let their workspaces
    # call the APIs they run here too, without a grant (docs/quickstart.md). Bound
    # wider, loopback stays closed as in production; the user's own choice stands.
    if _is_loopback(settings.host) and "CRANK_ALLOW_LOOPBACK_UPSTREAMS" not in os.environ:
        env["CRANK_ALLOW_LOOPBACK_UPSTREAMS"] = "true"
    return env


def _is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _serve(stack: contextlib.ExitStack, settings: Settings) -> int:
    # The data directory's lock first: a second `crank up` is told about the first
    # one, not about the ports that first one holds.
    directory = data_dir()
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    stack.enter_context(_data_dir_lock(directory))
    sales_port = demo_sales_port()
    host = client_host(settings.host)
    _check_port_free(settings.host, settings.control_plane_port, "CRANK_CONTROL_PLANE_PORT")
    _check_port_free("127.0.0.1", sales_port, "CRANK_DEMO_SALES_PORT")
    _check_port_free(settings.host, settings.gateway_port, "CRANK_GATEWAY_PORT")
    _check_port_free(settings.host, settings.metrics_port, "CRANK_METRICS_PORT")

    state = load_or_create_dev_state()
    secret_key = settings.secret_key or state.secret_key
    try:
        hasher = KeyHasher(secret_key)
    except ValueError as exc:  # a CRANK_SECRET_KEY from the environment that is too short
        raise CliError(str(exc)) from None

    if settings.database_url:
        database_url = settings.database_url
        embedded_pgdata: Path | None = None
        state.database_url = ""  # the user's URL may hold a password: not copied here
    else:
        pgdata = directory / "pgdata"
        server = stack.enter_context(embedded_postgres(pgdata))
        database_url = server.url()
        embedded_pgdata = pgdata
        state.database_url = database_url  # for `crank tokens` while this runs

    prepared = asyncio.run(_prepare(database_url, hasher, state, sales_port))
    state.admin_token = prepared.admin_token
    state.agent_keys = {a: k for (a, kind), k in prepared.keys.items() if kind == "agent"}
    state.approval_keys = {a: k for (a, kind), k in prepared.keys.items() if kind == "approval"}
    state.control_plane_url = f"http://{host}:{settings.control_plane_port}"
    state.gateway_url = f"http://{host}:{settings.gateway_port}"
    save_dev_state(state)

    env = _child_env(settings, database_url, secret_key, sales_port, state.gateway_url)
    supervisor = Supervisor()
    stack.callback(supervisor.stop_all)
    sales = supervisor.start(
        "sales-api",
        [sys.executable, "-m", "control_plane.demo.sales_api", "--port", str(sales_port)],
        env,
    )
    control_plane = supervisor.start("control-plane", control_plane_argv(settings), env)
    gateway = supervisor.start(
        "gateway",
        gateway_argv(
            msgspec.structs.replace(settings, gateway_workers=settings.gateway_workers or 1)
        ),
        env,
    )

    try:
        supervisor.wait_for_http(sales, f"http://127.0.0.1:{sales_port}/healthz", timeout_s=30)
        supervisor.wait_for_http(
            control_plane, f"{state.control_plane_url}/readyz", timeout_s=READY_TIMEOUT_S
        )
        supervisor.wait_for_http(gateway, f"{state.gateway_url}/healthz", timeout_s=30)
    except ChildFailed as exc:
        raise CliError(str(exc), exit_code=1) from None

    print(
        render_banner(
            state,
            dev_state_file=dev_state_path(),
            database=embedded_pgdata,
            sales_url=f"http://127.0.0.1:{sales_port}",
            language=settings.language,
            console_link=f"{state.control_plane_url}/ui/sign-in/link?code={prepared.console_code}",
        ),
        flush=True,
    )
    stopped = supervisor.watch()
    raise CliError(
        f"{stopped.name} exited with code {stopped.process.returncode}; stopping everything",
        exit_code=1,
    )


def run(args: argparse.Namespace) -> int:
    settings = cli_settings()
    configure_logging(settings.log_level, json=not sys.stderr.isatty())
    previous = {sig: signal.signal(sig, _raise_shutdown) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with contextlib.ExitStack() as stack:
            try:
                return _serve(stack, settings)
            except Shutdown as exc:
                print(f"\ncrank up: {exc}, stopping", file=sys.stderr, flush=True)
                return 0
            except CliError as exc:  # the reason before "stopped", not after it
                print(f"crank up: {exc.message}", file=sys.stderr, flush=True)
                return exc.exit_code
            finally:
                # The stack unwinds (children, database) with the signals ignored,
                # so a second Ctrl-C cannot cut the cleanup short.
                for sig in previous:
                    signal.signal(sig, _ignore_while_stopping)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        print("crank up: stopped", file=sys.stderr, flush=True)


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "up",
        help="run Crank locally: database, migrations, demo, servers (Ctrl-C stops all)",
        description=(
            "All-in-one local run. Uses CRANK_DATABASE_URL when set, else an embedded "
            "PostgreSQL 18 under the data directory (CRANK_DATA_DIR to move it). Prints "
            "the URLs, a dev admin token and demo keys: a local development tool."
        ),
    )
    parser.set_defaults(func=run)
