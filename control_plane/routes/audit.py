"""``/api/v1/workspaces/{workspace}/audit``: the workspace's audit log (viewer role)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from litestar import get
from litestar.params import FromQuery, QueryParameter

from control_plane.auth import Role
from control_plane.deps import CurrentWorkspace, DbConn
from control_plane.services.audit_query import (
    DEFAULT_LIMIT,
    AuditFilters,
    AuditPage,
    as_utc,
    list_audit,
)


@get(
    "/workspaces/{workspace:str}/audit",
    access=Role.VIEWER,
    tags=["audit"],
    summary="Read the audit log, newest first",
    description=(
        "Filter by `action` (exactly, or a family without a dot: `agent` is `agent.*`), "
        "`actor` (a part of it), `resource` (its name or type) and a time range (`from` "
        "inclusive, `to` exclusive). Pass `next_cursor` back as `cursor` for the next page; "
        "it is null on the last."
    ),
)
async def read_audit(
    ws: CurrentWorkspace,
    conn: DbConn,
    action: FromQuery[str | None] = None,
    actor: FromQuery[str | None] = None,
    resource: FromQuery[str | None] = None,
    since: Annotated[datetime | None, QueryParameter(name="from")] = None,
    until: Annotated[datetime | None, QueryParameter(name="to")] = None,
    limit: FromQuery[int] = DEFAULT_LIMIT,
    cursor: FromQuery[str | None] = None,
) -> AuditPage:
    filters = AuditFilters(
        action=action, actor=actor, resource=resource, since=as_utc(since), until=as_utc(until)
    )
    return await list_audit(conn, ws.id, limit=limit, cursor=cursor, filters=filters)


handlers: list[Any] = [read_audit]
