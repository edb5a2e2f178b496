"""The audit log page: the workspace's changes, filtered and paged (services/audit_query.py)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, get
from litestar.params import FromQuery, QueryParameter
from litestar.response import Template

from control_plane.auth import Role
from control_plane.console.listing import (
    HELPERS,
    blank_to_none,
    field_errors,
    list_url,
    parse_time,
    pushed_url,
    wants_fragment,
)
from control_plane.console.rendering import page
from control_plane.deps import CurrentWorkspace, DbConn
from control_plane.errors import ValidationFailed
from control_plane.services.audit_query import AuditFilters, AuditPage, list_audit

PAGE_SIZE = 50


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
    result: AuditPage | None = None
    errors: dict[str, str] = {}
    try:
        filters = AuditFilters(
            action=blank_to_none(action),
            actor=blank_to_none(actor),
            resource=blank_to_none(resource),
            since=parse_time("from", since),
            until=parse_time("to", until),
        )
        result = await list_audit(
            conn, ws.id, limit=PAGE_SIZE, cursor=blank_to_none(cursor), filters=filters
        )
    except ValidationFailed as exc:
        errors = field_errors(exc)
    fragment = wants_fragment(request)
    path = f"/ui/w/{ws.slug}/audit"
    return page(
        request,
        "_audit.html" if fragment else "audit.html",
        status_code=400 if errors and not fragment else 200,
        headers=pushed_url(fragment, list_url(path, form, blank_to_none(cursor))),
        form=form,
        errors=errors,
        result=result,
        path=path,
        first_url=list_url(path, form),
        next_url=list_url(path, form, result.next_cursor) if result and result.next_cursor else "",
        paged=bool(cursor),
        **HELPERS,
    )


handlers: list[Any] = [audit_log]
