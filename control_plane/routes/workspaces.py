"""``/api/v1/workspaces`` and ``/api/v1/me``."""

from __future__ import annotations

import msgspec
from litestar import Controller, get, post
from litestar.params import JSONBody

from control_plane.access import ANY_CALLER, INSTANCE_ADMIN
from control_plane.api_document import body_example, constrain
from control_plane.api_document.constraints import WORKSPACE_SLUG
from control_plane.auth import Role
from control_plane.deps import Caller, CurrentWorkspace, DbConn
from control_plane.errors import Conflict
from control_plane.services.workspaces import (
    WorkspaceView,
    create_workspace,
    get_workspace,
    list_workspaces,
)


class WorkspaceCreate(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    slug: str
    title: str = ""


constrain(WorkspaceCreate, {"slug": {"pattern": WORKSPACE_SLUG}})
body_example(WorkspaceCreate, "A workspace", {"slug": "payments", "title": "Payments"})


class WorkspaceList(msgspec.Struct, kw_only=True):
    items: list[WorkspaceView]


class Me(msgspec.Struct, kw_only=True):
    name: str
    token_prefix: str
    instance_admin: bool
    workspaces: list[WorkspaceView]


@get(
    "/me",
    access=ANY_CALLER,
    tags=["workspaces"],
    summary="Who the token belongs to and what it may reach",
)
async def me(conn: DbConn, principal: Caller) -> Me:
    return Me(
        name=principal.name,
        token_prefix=principal.token_prefix,
        instance_admin=principal.is_instance_admin,
        workspaces=await list_workspaces(conn, principal),
    )


class WorkspaceController(Controller):
    path = "/workspaces"
    tags = ["workspaces"]

    @get("/", access=ANY_CALLER, summary="List the workspaces this token can see")
    async def list(self, conn: DbConn, principal: Caller) -> WorkspaceList:
        return WorkspaceList(items=await list_workspaces(conn, principal))

    @post(
        "/",
        access=INSTANCE_ADMIN,
        summary="Create a workspace (instance admins only)",
        errors=[Conflict],
    )
    async def create(
        self, data: JSONBody[WorkspaceCreate], conn: DbConn, principal: Caller
    ) -> WorkspaceView:
        return await create_workspace(conn, principal, data.slug, data.title)

    @get("/{workspace:str}", access=Role.VIEWER, summary="Read a workspace")
    async def read(self, ws: CurrentWorkspace, conn: DbConn, principal: Caller) -> WorkspaceView:
        return await get_workspace(conn, principal, ws)
