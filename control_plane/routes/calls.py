"""``/api/v1/workspaces/{workspace}/calls``: the gateways' call log (viewer role)."""

from __future__ import annotations

from typing import Any

from litestar import get
from litestar.params import FromQuery

from control_plane.auth import Role
from control_plane.deps import CurrentWorkspace, DbConn
from control_plane.services.calls import DEFAULT_LIMIT, CallFilters, CallPage, list_calls


@get(
    "/workspaces/{workspace:str}/calls",
    access=Role.VIEWER,
    tags=["calls"],
    summary="Read the call log, newest first",
    description=(
        "One entry per tools/call of a known tool, written by the gateways in batches "
        "(about a second behind). Filter by `agent` (slug), `tool` and `outcome` (`ok` or an "
        "error code); pass `next_cursor` back as `cursor` for the next page."
    ),
)
async def read_calls(
    ws: CurrentWorkspace,
    conn: DbConn,
    agent: FromQuery[str | None] = None,
    tool: FromQuery[str | None] = None,
    outcome: FromQuery[str | None] = None,
    limit: FromQuery[int] = DEFAULT_LIMIT,
    cursor: FromQuery[str | None] = None,
) -> CallPage:
    filters = CallFilters(agent=agent, tool=tool, outcome=outcome)
    return await list_calls(conn, ws.id, filters, limit=limit, cursor=cursor)


handlers: list[Any] = [read_calls]
