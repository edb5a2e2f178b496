"""``crank seed-demo``: the demo workspace, operations and agents, published.

Idempotent: the demo file goes through the same ``apply_file`` as ``crank
apply``, which writes nothing when nothing changed, so a second run leaves
every row, the audit log and the catalog version as they were. The demo
workspace is granted its loopback sales API (``crank up`` allowlists it for
the instance; docs/architecture.md, "Egress per workspace"), once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib

from control_plane.auth import Principal, Role, Workspace
from control_plane.cli.common import CliError, cli_settings, require_database_url
from control_plane.demo import DEMO_WORKSPACE, demo_sales_port, load_demo_file
from control_plane.errors import Conflict
from control_plane.services.apply import apply_file
from control_plane.services.apply_plan import ApplyPlan
from control_plane.services.egress import grant_once
from control_plane.services.workspaces import create_workspace
from shared.db import Connection, connect

SEED_ACTOR = "crank seed-demo"


async def ensure_workspace(conn: Connection, slug: str, actor: str) -> Workspace:
    """The workspace ``slug``, created (and audited as ``actor``) when missing."""
    cur = await conn.execute("SELECT id, slug, title FROM workspaces WHERE slug = %s", (slug,))
    row = await cur.fetchone()
    if row is None:
        # Audit records name this principal as "<actor> (cli)"; it holds no token.
        principal = Principal(
            user_id=0,
            name=actor,
            token_id=0,
            token_prefix="cli",  # noqa: S106 - a label, not a secret
            is_instance_admin=True,
        )
        with contextlib.suppress(Conflict):  # created concurrently: read it below
            await create_workspace(conn, principal, slug, "Demo")
        cur = await conn.execute("SELECT id, slug, title FROM workspaces WHERE slug = %s", (slug,))
        row = await cur.fetchone()
        assert row is not None
    return Workspace(id=row["id"], slug=row["slug"], title=row["title"], role=Role.OWNER)


async def seed_demo(conn: Connection, *, sales_port: int, actor: str = SEED_ACTOR) -> ApplyPlan:
    """Apply the demo file with publish inside the caller's transaction."""
    file = load_demo_file(sales_port)
    workspace = await ensure_workspace(conn, file.workspace or DEMO_WORKSPACE, actor)
    plan = await apply_file(conn, workspace, actor, file, publish=True, dry_run=False)
    if plan.errors:
        details = "; ".join(f"{e.field}: {e.message}" for e in plan.errors)
        raise CliError(f"the demo file does not apply: {details}", exit_code=1)
    await grant_once(conn, workspace, actor, f"127.0.0.1:{sales_port}")
    return plan


def describe(plan: ApplyPlan) -> list[str]:
    lines = []
    for item in plan.items:
        version = f" v{item.version}" if item.version is not None else ""
        published = ", published" if item.publish else ""
        lines.append(f"  {item.kind} {item.name}: {item.action}{published}{version}")
        lines += [f"    warning {w.code}: {w.message}" for w in item.warnings]
    return lines


async def _run(database_url: str, sales_port: int) -> ApplyPlan:
    async with await connect(database_url) as conn:
        plan = await seed_demo(conn, sales_port=sales_port)
        await conn.commit()
    return plan


def run(args: argparse.Namespace) -> int:
    settings = cli_settings()
    plan = asyncio.run(_run(require_database_url(settings), demo_sales_port()))
    print(
        f"demo seed in workspace {plan.workspace!r}: {'changed' if plan.changed else 'unchanged'}"
    )
    for line in describe(plan):
        print(line)
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "seed-demo",
        help="create workspace 'default' with the demo agents, published (idempotent)",
        description=(
            "Create workspace 'default' if missing and apply the demo file (agents "
            "currency-rates and sales) with publish. A second run changes nothing. "
            "The sales operations call http://127.0.0.1:$CRANK_DEMO_SALES_PORT (default 8090)."
        ),
    )
    parser.set_defaults(func=run)
