"""The audit log page: the workspace's changes, filtered and paged (services/audit_query.py)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, get
from litestar.params import FromQuery, QueryParameter
from litestar.response import Template

from control_plane.auth import Role
from control_plane.console.listing import PAGE_SIZE, blank_to_none, list_page, parse_time
from control_plane.deps import CurrentWorkspace, DbConn
from control_plane.services.audit_query import AuditFilters, AuditPage, list_audit


@get("/w/{workspace:str}/audit", access=Role.VIEWER)
async def audit_log(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    action: FromQuery[str] = "",
    actor: FromQuery[str] = "",
    resource: FromQuery[str] = "",
    since: Annotated[str, QueryParameter(name="from")] = "",
    until: Annotated[str, QueryParameter(name="to")] = "",
    cursor: FromQuery[str] = "",
) -> Template:
    form = {"action": action, "actor": actor, "resource": resource, "from": since, "to": until}

    async def load(at: str | None) -> AuditPage:
        filters = AuditFilters(
            action=blank_to_none(action),
            actor=blank_to_none(actor),
            resource=blank_to_none(resource),
            since=parse_time("from", since),
            until=parse_time("to", until),
        )
        return await list_audit(conn, ws.id, limit=PAGE_SIZE, cursor=at, filters=filters)

    return await list_page(request, ws, "audit", form, cursor, load)


handlers: list[Any] = [audit_log]
