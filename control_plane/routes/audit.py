"""``/api/v1/workspaces/{workspace}/audit``: the workspace's audit log (viewer role)."""

from __future__ import annotations

from typing import Any

from litestar import get
from litestar.params import FromQuery

from control_plane.auth import Role
from control_plane.deps import CurrentWorkspace, DbConn
from control_plane.services.audit_query import DEFAULT_LIMIT, AuditPage, list_audit


@get(
    "/workspaces/{workspace:str}/audit",
    access=Role.VIEWER,
    tags=["audit"],
    summary="Read the audit log, newest first",
    description="Pass `next_cursor` back as `cursor` for the next page; it is null on the last.",
)
async def read_audit(
    ws: CurrentWorkspace,
    conn: DbConn,
    limit: FromQuery[int] = DEFAULT_LIMIT,
    cursor: FromQuery[str | None] = None,
) -> AuditPage:
    return await list_audit(conn, ws.id, limit=limit, cursor=cursor)


handlers: list[Any] = [read_audit]
