"""The ``crank`` command line.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``,
which registers the subcommand and sets ``func`` (``args -> exit code``) on
it. Runtime commands (``up``, ``migrate``, ``control-plane``, ``mcp-server``,
``seed-demo``, ``tokens``) work on the database or start processes; client
commands (``apply``, ``export``, ``import-openapi``, ``keys``, ``secrets``) talk to the
control-plane API;
``lint`` needs neither.

Exit codes: 0 success, 1 the work was refused (lint errors, a child process
died), 2 a usage or setup error (missing settings, unknown workspace,
unreachable server).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import psycopg

from control_plane.cli import (
    apply_cmd,
    export_cmd,
    import_cmd,
    keys_cmd,
    lint_cmd,
    migrate_cmd,
    secrets_cmd,
    seed,
    servers_cmd,
    tokens_cmd,
    up,
)
from control_plane.cli.common import CliError

COMMAND_MODULES = (
    up,
    migrate_cmd,
    servers_cmd,
    seed,
    tokens_cmd,
    apply_cmd,
    export_cmd,
    import_cmd,
    lint_cmd,
    keys_cmd,
    secrets_cmd,
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="crank",
        description="Crank publishes REST operations as MCP tools.",
        epilog="Settings come from CRANK_* environment variables (docs/settings.md).",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for module in COMMAND_MODULES:
        module.add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``crank`` command; returns its exit code, failures printed on stderr."""
    args = build_parser().parse_args(argv)
    try:
        code = args.func(args)
    except CliError as exc:
        print(f"crank {args.command}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except psycopg.OperationalError as exc:
        print(f"crank {args.command}: cannot use the database: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return int(code)
