"""The audit log: every change and every publish, written in the same transaction."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

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
    await conn.execute(
        """INSERT INTO audit_log (workspace_id, actor, action, resource_type, resource_name, details)
           VALUES (%s, %s, %s, %s, %s, %s)""",
        (workspace_id, actor, action, resource_type, resource_name, Jsonb(details or {})),
    )
