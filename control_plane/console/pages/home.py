"""The console's home: the workspace chooser and a workspace's overview."""

from __future__ import annotations

from typing import Any

from litestar import Request, get
from litestar.response import Redirect, Template

from control_plane.access import ANY_CALLER
from control_plane.auth import Role
from control_plane.console.rendering import page
from control_plane.deps import Caller, CurrentWorkspace, DbConn
from control_plane.services.overview import workspace_overview
from control_plane.services.workspaces import list_workspaces


@get("/", access=ANY_CALLER)
async def home(
    request: Request[Any, Any, Any], principal: Caller, conn: DbConn
) -> Template | Redirect:
    workspaces = await list_workspaces(conn, principal)
    if len(workspaces) == 1:
        return Redirect(f"/ui/w/{workspaces[0].slug}", status_code=303)
    return page(request, "home.html", workspaces=workspaces)


@get("/w/{workspace:str}/", access=Role.VIEWER)
async def overview(request: Request[Any, Any, Any], ws: CurrentWorkspace, conn: DbConn) -> Template:
    return page(request, "overview.html", overview=await workspace_overview(conn, ws.id))


handlers: list[Any] = [home, overview]
