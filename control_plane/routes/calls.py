"""``/api/v1/workspaces/{workspace}/calls``: the gateways' call log (viewer role)."""

from __future__ import annotations

from typing import Any

from litestar import get
from litestar.params import FromPath, FromQuery

from control_plane.auth import Role, load_workspace
from control_plane.deps import Caller, DbConn
from control_plane.services.calls import DEFAULT_LIMIT, CallFilters, CallPage, list_calls


@get(
    "/workspaces/{workspace:str}/calls",
    tags=["calls"],
    summary="Read the call log, newest first",
    description=(
        "One entry per tools/call of a known tool, written by the gateways in batches "
        "(about a second behind). Filter by `agent` (slug), `tool` and `outcome` (`ok` or an "
        "error code); pass `next_cursor` back as `cursor` for the next page."
    ),
)
async def read_calls(
    workspace: FromPath[str],
    conn: DbConn,
    principal: Caller,
    agent: FromQuery[str | None] = None,
    tool: FromQuery[str | None] = None,
    outcome: FromQuery[str | None] = None,
    limit: FromQuery[int] = DEFAULT_LIMIT,
    cursor: FromQuery[str | None] = None,
) -> CallPage:
    ws = await load_workspace(conn, principal, workspace, Role.VIEWER)
    filters = CallFilters(agent=agent, tool=tool, outcome=outcome)
    return await list_calls(conn, ws.id, filters, limit=limit, cursor=cursor)


handlers: list[Any] = [read_calls]
