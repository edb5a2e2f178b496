"""``/api/v1/workspaces/{workspace}/calls``: the gateways' call log (viewer role)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from litestar import get
from litestar.params import FromQuery, QueryParameter

from control_plane.auth import Role
from control_plane.deps import CurrentWorkspace, DbConn
from control_plane.services.audit_query import as_utc
from control_plane.services.calls import DEFAULT_LIMIT, CallFilters, CallPage, list_calls


@get(
    "/workspaces/{workspace:str}/calls",
    access=Role.VIEWER,
    tags=["calls"],
    summary="Read the call log, newest first",
    description=(
        "One entry per tools/call of a known tool, written by the gateways in batches "
        "(about a second behind). Filter by `agent` (slug), `tool`, `outcome` (`ok` or an "
        "error code), `request_id`, who signed in with a token (`principal_issuer`, "
        "`principal_subject`: exact values, as each entry shows them) and a time range "
        "(`from` inclusive, `to` exclusive; ISO 8601, UTC without an offset); pass "
        "`next_cursor` back as `cursor` for the next page."
    ),
)
async def read_calls(
    ws: CurrentWorkspace,
    conn: DbConn,
    agent: FromQuery[str | None] = None,
    tool: FromQuery[str | None] = None,
    outcome: FromQuery[str | None] = None,
    request_id: FromQuery[str | None] = None,
    principal_issuer: FromQuery[str | None] = None,
    principal_subject: FromQuery[str | None] = None,
    since: Annotated[datetime | None, QueryParameter(name="from")] = None,
    until: Annotated[datetime | None, QueryParameter(name="to")] = None,
    limit: FromQuery[int] = DEFAULT_LIMIT,
    cursor: FromQuery[str | None] = None,
) -> CallPage:
    filters = CallFilters(
        agent=agent,
        tool=tool,
        outcome=outcome,
        request_id=request_id,
        principal_issuer=principal_issuer,
        principal_subject=principal_subject,
        since=as_utc(since),
        until=as_utc(until),
    )
    return await list_calls(conn, ws.id, filters, limit=limit, cursor=cursor)


handlers: list[Any] = [read_calls]
