"""``crank control-plane`` and ``crank mcp-server`` (alias ``gateway``): one server each.

Both are granian serving an ASGI factory, for deployment (one process per
container); ``crank up`` starts the same command lines as child processes.
The gateway is started by module path, never imported: ``control_plane`` and
``mcp_gateway`` do not import each other.
"""

from __future__ import annotations

import argparse
import os
import sys

from control_plane.cli.common import cli_settings, key_hasher, require_database_url
from shared.settings import Settings, usable_cpus

CONTROL_PLANE_APP = "control_plane.app:create_app"
# Started by module path, never imported (docs/architecture.md, "Where code lives").
GATEWAY_APP = "mcp_gateway.app:create_app"


def granian_argv(app: str, host: str, port: int, *, workers: int = 1) -> list[str]:
    return [
        sys.executable,
        "-m",
        "granian",
        "--interface",
        "asgi",
        "--factory",
        "--no-ws",
        "--workers",
        str(workers),
        "--host",
        host,
        "--port",
        str(port),
        app,
    ]


def control_plane_argv(settings: Settings) -> list[str]:
    """The granian command line that serves the control plane on the settings' host and port."""
    return granian_argv(CONTROL_PLANE_APP, settings.host, settings.control_plane_port)


def gateway_workers(settings: Settings) -> int:
    """``CRANK_GATEWAY_WORKERS``, or one worker per usable CPU when it is 0."""
    return settings.gateway_workers or usable_cpus()


def gateway_argv(settings: Settings) -> list[str]:
    """The granian command line that serves the gateway (by module path, never imported)."""
    return granian_argv(
        GATEWAY_APP, settings.host, settings.gateway_port, workers=gateway_workers(settings)
    )


def _check_server_settings() -> Settings:
    settings = cli_settings()
    require_database_url(settings)
    key_hasher(settings)  # CRANK_SECRET_KEY set and long enough
    return settings


def run_control_plane(args: argparse.Namespace) -> int:
    argv = control_plane_argv(_check_server_settings())
    # granian takes over the process (and its signals); argv is ours, no shell involved.
    os.execv(argv[0], argv)  # noqa: S606


def run_gateway(args: argparse.Namespace) -> int:
    settings = _check_server_settings()
    argv = gateway_argv(settings)
    # Each worker reads the count: worker i serves metrics on CRANK_METRICS_PORT + i.
    os.environ["CRANK_GATEWAY_WORKERS"] = str(gateway_workers(settings))
    os.execv(argv[0], argv)  # noqa: S606


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    control_plane = subparsers.add_parser(
        "control-plane",
        help="serve the admin API (granian, CRANK_HOST:CRANK_CONTROL_PLANE_PORT)",
        description="Run the control plane alone. Needs CRANK_DATABASE_URL and CRANK_SECRET_KEY.",
    )
    control_plane.set_defaults(func=run_control_plane)
    gateway = subparsers.add_parser(
        "mcp-server",
        aliases=["gateway"],
        help="serve the MCP gateway (granian, CRANK_HOST:CRANK_GATEWAY_PORT)",
        description="Run the MCP gateway alone. Needs CRANK_DATABASE_URL and CRANK_SECRET_KEY.",
    )
    gateway.set_defaults(func=run_gateway)
