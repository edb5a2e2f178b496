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
import importlib
import sys
from collections.abc import Sequence

from control_plane.cli.common import CliError

# Each command and the module that registers it. Running a command imports only
# its own module: ``crank apply`` of a large file should not also carry the
# database driver and the server stack in memory (docs/performance.md, "Applying
# a large file"). ``crank --help`` and a mistyped command import them all.
COMMANDS: dict[str, str] = {
    "up": "up",
    "migrate": "migrate_cmd",
    "control-plane": "servers_cmd",
    "mcp-server": "servers_cmd",
    "gateway": "servers_cmd",
    "seed-demo": "seed",
    "tokens": "tokens_cmd",
    "apply": "apply_cmd",
    "export": "export_cmd",
    "import-openapi": "import_cmd",
    "lint": "lint_cmd",
    "keys": "keys_cmd",
    "secrets": "secrets_cmd",
}
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))  # the order of crank --help


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of every command, or of ``command`` alone when it is one."""
    parser = argparse.ArgumentParser(
        prog="crank",
        description="Crank publishes REST operations as MCP tools.",
        epilog="Settings come from CRANK_* environment variables (docs/settings.md).",
    )
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    modules = (COMMANDS[command],) if command in COMMANDS else COMMAND_MODULES
    for name in modules:
        importlib.import_module(f"control_plane.cli.{name}").add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the ``crank`` command; returns its exit code, failures printed on stderr."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    args = build_parser(arguments[0] if arguments else None).parse_args(arguments)
    try:
        code = args.func(args)
    except CliError as exc:
        print(f"crank {args.command}: {exc.message}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except Exception as exc:
        # Only commands that use the database import psycopg; its errors are theirs.
        psycopg = sys.modules.get("psycopg")
        if psycopg is None or not isinstance(exc, psycopg.OperationalError):
            raise
        print(f"crank {args.command}: cannot use the database: {exc}", file=sys.stderr)
        return 2
    return int(code)
