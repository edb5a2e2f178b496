"""``crank migrate``: apply the pending SQL migrations (safe to run from many replicas at once)."""

from __future__ import annotations

import argparse
import asyncio

from control_plane.cli.common import cli_settings, require_database_url
from shared.migrate import migrate


def run(args: argparse.Namespace) -> int:
    database_url = require_database_url(cli_settings())
    applied = asyncio.run(migrate(database_url))
    if not applied:
        print("migrations: nothing to apply, the schema is up to date")
    for migration in applied:
        print(f"migrations: applied {migration.version:04d}_{migration.name}")
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "migrate",
        help="apply pending database migrations",
        description="Apply the pending migrations to CRANK_DATABASE_URL under an advisory lock.",
    )
    parser.set_defaults(func=run)
