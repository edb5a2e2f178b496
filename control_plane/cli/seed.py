"""``crank seed-demo``: the demo workspace, operations and agents, published.

Only what is missing: a demo operation or agent is created (and published)
when the workspace does not have it and the seed has never created it there
before (table ``demo_seeded``). What exists is never touched, so a user's edit
survives every later ``crank up``; a demo object the user deleted stays
deleted (docs/architecture.md, "The demo seed"). The missing part goes through
the same ``apply_file`` as ``crank apply``. The demo workspace is granted its
loopback sales API (``crank up`` allowlists it for the instance;
docs/architecture.md, "Egress per workspace"), once.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
from dataclasses import dataclass, field

import msgspec

from control_plane.auth import Principal, Role, Workspace
from control_plane.cli.common import CliError, cli_settings, require_database_url
from control_plane.demo import DEMO_WORKSPACE, demo_sales_port, load_demo_file
from control_plane.errors import Conflict
from control_plane.services.apply import apply_file
from control_plane.services.apply_plan import ApplyPlan
from control_plane.services.egress import grant_once
from control_plane.services.workspaces import create_workspace
from shared.db import Connection, connect
from shared.engine.spec import CrankFile

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


@dataclass(slots=True)
class DemoSeed:
    """What one seed did: ``plan`` for what it created; ``kept`` exist and were left as
    they are; ``deleted`` were seeded once and removed since, so not created again.
    Names read ``operation NAME`` or ``agent SLUG``."""

    plan: ApplyPlan
    kept: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)

    @property
    def created(self) -> list[str]:
        return [f"{item.kind} {item.name}" for item in self.plan.items]


async def _names(conn: Connection, query: str, *params: object) -> set[tuple[str, str]]:
    cur = await conn.execute(query, params)
    return {(row["kind"], row["name"]) for row in await cur.fetchall()}


async def _present(conn: Connection, ws: Workspace, file: CrankFile) -> set[tuple[str, str]]:
    """The demo objects the workspace has now, locked against a concurrent delete."""
    operations = await _names(
        conn,
        """SELECT 'operation' AS kind, name FROM operations
            WHERE workspace_id = %s AND name = ANY(%s) ORDER BY id FOR KEY SHARE""",
        ws.id,
        [op.name for op in file.operations],
    )
    agents = await _names(
        conn,
        """SELECT 'agent' AS kind, slug AS name FROM agents
            WHERE workspace_id = %s AND slug = ANY(%s) ORDER BY id FOR KEY SHARE""",
        ws.id,
        [agent.slug for agent in file.agents],
    )
    return operations | agents


async def _record(conn: Connection, ws: Workspace, objects: list[tuple[str, str]]) -> None:
    """Remember ``objects`` as seeded here, so a later delete is respected."""
    async with conn.cursor() as cur:
        await cur.executemany(
            """INSERT INTO demo_seeded (workspace_id, kind, name) VALUES (%s, %s, %s)
               ON CONFLICT DO NOTHING""",
            [(ws.id, kind, name) for kind, name in objects],
        )


async def seed_demo(conn: Connection, *, sales_port: int, actor: str = SEED_ACTOR) -> DemoSeed:
    """Create and publish the missing demo objects inside the caller's transaction."""
    file = load_demo_file(sales_port)
    workspace = await ensure_workspace(conn, file.workspace or DEMO_WORKSPACE, actor)
    # Two seeds of one workspace (crank up and crank seed-demo) run one after the other.
    await conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (f"crank.demo:{workspace.id}",)
    )
    present = await _present(conn, workspace, file)
    seeded = await _names(
        conn, "SELECT kind, name FROM demo_seeded WHERE workspace_id = %s", workspace.id
    )
    every = [("operation", op.name) for op in file.operations]
    every += [("agent", agent.slug) for agent in file.agents]
    missing = {obj for obj in every if obj not in present and obj not in seeded}
    result = DemoSeed(
        plan=ApplyPlan(workspace=workspace.slug, dry_run=False),
        kept=[f"{kind} {name}" for kind, name in every if (kind, name) in present],
        deleted=[f"{kind} {name}" for kind, name in every if (kind, name) in seeded - present],
    )
    if missing:
        part = msgspec.structs.replace(
            file,
            operations=[op for op in file.operations if ("operation", op.name) in missing],
            agents=[agent for agent in file.agents if ("agent", agent.slug) in missing],
        )
        result.plan = await apply_file(conn, workspace, actor, part, publish=True, dry_run=False)
        if result.plan.errors:
            details = "; ".join(f"{e.field}: {e.message}" for e in result.plan.errors)
            raise CliError(f"the demo file does not apply: {details}", exit_code=1)
    await _record(conn, workspace, [obj for obj in every if obj in present or obj in missing])
    await grant_once(conn, workspace, actor, f"127.0.0.1:{sales_port}")
    return result


def describe(seed: DemoSeed) -> list[str]:
    lines = []
    for item in seed.plan.items:
        version = f" v{item.version}" if item.version is not None else ""
        published = ", published" if item.publish else ""
        lines.append(f"  {item.kind} {item.name}: {item.action}{published}{version}")
        lines += [f"    warning {w.code}: {w.message}" for w in item.warnings]
    lines += [f"  {name}: exists, left as it is" for name in seed.kept]
    lines += [f"  {name}: deleted since it was seeded, not created again" for name in seed.deleted]
    return lines


async def _run(database_url: str, sales_port: int) -> DemoSeed:
    async with await connect(database_url) as conn:
        seed = await seed_demo(conn, sales_port=sales_port)
        await conn.commit()
    return seed


def run(args: argparse.Namespace) -> int:
    settings = cli_settings()
    seed = asyncio.run(_run(require_database_url(settings), demo_sales_port()))
    print(
        f"demo seed in workspace {seed.plan.workspace!r}: "
        f"{'changed' if seed.plan.changed else 'unchanged'}"
    )
    for line in describe(seed):
        print(line)
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "seed-demo",
        help="create workspace 'default' with the demo agents, published (only what is missing)",
        description=(
            "Create workspace 'default' if missing and the demo operations and agents "
            "(currency-rates and sales) it does not have, published. What exists is left as "
            "it is, and a demo object deleted since it was seeded is not created again. "
            "The sales operations call http://127.0.0.1:$CRANK_DEMO_SALES_PORT (default 8090)."
        ),
    )
    parser.set_defaults(func=run)
