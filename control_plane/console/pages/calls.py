"""The call log page: the gateways' calls, filtered and paged (services/calls.py)."""

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
from control_plane.services.calls import OUTCOMES, CallFilters, CallPage, list_calls

PAGE_SIZE = 50


@get("/w/{workspace:str}/calls", access=Role.VIEWER)
async def call_log(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    agent: FromQuery[str] = "",
    tool: FromQuery[str] = "",
    outcome: FromQuery[str] = "",
    request_id: FromQuery[str] = "",
    since: Annotated[str, QueryParameter(name="from")] = "",
    until: Annotated[str, QueryParameter(name="to")] = "",
    cursor: FromQuery[str] = "",
) -> Template:
    form = {
        "agent": agent,
        "tool": tool,
        "outcome": outcome,
        "request_id": request_id,
        "from": since,
        "to": until,
    }
    result: CallPage | None = None
    errors: dict[str, str] = {}
    try:
        filters = CallFilters(
            agent=blank_to_none(agent),
            tool=blank_to_none(tool),
            outcome=blank_to_none(outcome),
            request_id=blank_to_none(request_id),
            since=parse_time("from", since),
            until=parse_time("to", until),
        )
        result = await list_calls(
            conn, ws.id, filters, limit=PAGE_SIZE, cursor=blank_to_none(cursor)
        )
    except ValidationFailed as exc:
        errors = field_errors(exc)
    fragment = wants_fragment(request)
    path = f"/ui/w/{ws.slug}/calls"
    return page(
        request,
        "_calls.html" if fragment else "calls.html",
        status_code=400 if errors and not fragment else 200,
        headers=pushed_url(fragment, list_url(path, form, blank_to_none(cursor))),
        form=form,
        errors=errors,
        result=result,
        outcomes=sorted(OUTCOMES),
        path=path,
        first_url=list_url(path, form),
        next_url=list_url(path, form, result.next_cursor) if result and result.next_cursor else "",
        paged=bool(cursor),
        **HELPERS,
    )


handlers: list[Any] = [call_log]
