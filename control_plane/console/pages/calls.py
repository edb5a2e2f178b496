"""The call log page: the gateways' calls, filtered and paged (services/calls.py)."""

from __future__ import annotations

from typing import Annotated, Any

from litestar import Request, get
from litestar.params import FromQuery, QueryParameter
from litestar.response import Template

from control_plane.auth import Role
from control_plane.console.listing import PAGE_SIZE, blank_to_none, list_page, parse_time
from control_plane.deps import CurrentWorkspace, DbConn
from control_plane.services.calls import OUTCOMES, CallFilters, CallPage, list_calls


@get("/w/{workspace:str}/calls", access=Role.VIEWER)
async def call_log(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    agent: FromQuery[str] = "",
    tool: FromQuery[str] = "",
    outcome: FromQuery[str] = "",
    request_id: FromQuery[str] = "",
    principal_subject: FromQuery[str] = "",
    since: Annotated[str, QueryParameter(name="from")] = "",
    until: Annotated[str, QueryParameter(name="to")] = "",
    cursor: FromQuery[str] = "",
) -> Template:
    form = {
        "agent": agent,
        "tool": tool,
        "outcome": outcome,
        "request_id": request_id,
        "principal_subject": principal_subject,
        "from": since,
        "to": until,
    }

    async def load(at: str | None) -> CallPage:
        filters = CallFilters(
            agent=blank_to_none(agent),
            tool=blank_to_none(tool),
            outcome=blank_to_none(outcome),
            request_id=blank_to_none(request_id),
            principal_subject=blank_to_none(principal_subject),
            since=parse_time("from", since),
            until=parse_time("to", until),
        )
        return await list_calls(conn, ws.id, filters, limit=PAGE_SIZE, cursor=at)

    return await list_page(request, ws, "calls", form, cursor, load, outcomes=sorted(OUTCOMES))


handlers: list[Any] = [call_log]
