"""The audit log: every change and every publish, written in the same transaction."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from control_plane.auth import Workspace
from control_plane.services.catalog import bump_catalog
from shared.db import Connection


async def record(
    conn: Connection,
    *,
    workspace_id: int | None,
    actor: str,
    action: str,
    resource_type: str,
    resource_name: str = "",
    details: dict[str, Any] | None = None,
) -> None:
    """Writes one audit row in the caller's transaction; ``details`` must hold no secret."""
    await conn.execute(
        """INSERT INTO audit_log (workspace_id, actor, action, resource_type, resource_name, details)
           VALUES (%s, %s, %s, %s, %s, %s)""",
        (workspace_id, actor, action, resource_type, resource_name, Jsonb(details or {})),
    )


async def record_change(
    conn: Connection,
    ws: Workspace,
    actor: str,
    action: str,
    resource_name: str,
    details: dict[str, Any] | None = None,
    *,
    resource_type: str | None = None,
    notify_gateways: bool = False,
) -> None:
    """Audit ``action`` (``agent.publish``) on a resource of ``ws``; its type is the
    action's first word unless given. ``notify_gateways``: the gateways must see
    the change, so the catalog is bumped too (both take effect at commit)."""
    if notify_gateways:
        await bump_catalog(conn)
    await record(
        conn,
        workspace_id=ws.id,
        actor=actor,
        action=action,
        resource_type=resource_type or action.partition(".")[0],
        resource_name=resource_name,
        details=details,
    )
