"""Workspaces: the tenant boundary; everything else belongs to exactly one."""

from __future__ import annotations

from datetime import datetime

import msgspec
from psycopg import errors as pg_errors

from control_plane.auth import Principal, Workspace
from control_plane.errors import Conflict, ValidationFailed
from control_plane.services.audit import record
from control_plane.services.constraints import refuse_check_violations
from shared.db import Connection
from shared.engine.spec_validation import SLUG, FieldError


class WorkspaceView(msgspec.Struct, kw_only=True):
    """A workspace and the caller's role in it (``admin`` for instance admins)."""

    slug: str
    title: str
    role: str
    created_at: datetime


def _role_label(principal: Principal, ws_role: str) -> str:
    return "admin" if principal.is_instance_admin else ws_role


async def list_workspaces(conn: Connection, principal: Principal) -> list[WorkspaceView]:
    """The workspaces the caller has a role in (every one for an instance admin)."""
    cur = await conn.execute("SELECT id, slug, title, created_at FROM workspaces ORDER BY slug")
    views = []
    for row in await cur.fetchall():
        role = principal.role_in(row["id"])
        if role is None:
            continue
        views.append(
            WorkspaceView(
                slug=row["slug"],
                title=row["title"],
                role=_role_label(principal, role.name.lower()),
                created_at=row["created_at"],
            )
        )
    return views


async def get_workspace(conn: Connection, principal: Principal, ws: Workspace) -> WorkspaceView:
    """One workspace the caller may see (``ws`` from ``load_workspace``)."""
    cur = await conn.execute("SELECT created_at FROM workspaces WHERE id = %s", (ws.id,))
    row = await cur.fetchone()
    assert row is not None  # load_workspace just found it, in this transaction
    return WorkspaceView(
        slug=ws.slug,
        title=ws.title,
        role=_role_label(principal, ws.role.name.lower()),
        created_at=row["created_at"],
    )


async def create_workspace(
    conn: Connection, principal: Principal, slug: str, title: str
) -> WorkspaceView:
    """Creates and audits it; raises ValidationFailed, or Conflict ``already_exists``."""
    if not SLUG.fullmatch(slug):
        raise ValidationFailed(
            [FieldError("slug", "1-63 lowercase letters, digits and -, starting alnum")]
        )
    try:
        with refuse_check_violations():
            async with conn.transaction():
                cur = await conn.execute(
                    "INSERT INTO workspaces (slug, title) VALUES (%s, %s) RETURNING id, created_at",
                    (slug, title),
                )
    except pg_errors.UniqueViolation:
        raise Conflict(f"workspace {slug!r} already exists", code="already_exists") from None
    row = await cur.fetchone()
    assert row is not None
    await record(
        conn,
        workspace_id=row["id"],
        actor=principal.actor,
        action="workspace.create",
        resource_type="workspace",
        resource_name=slug,
        details={"title": title},
    )
    return WorkspaceView(slug=slug, title=title, role="admin", created_at=row["created_at"])
