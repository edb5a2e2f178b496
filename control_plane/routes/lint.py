"""The linter over the API: a whole operation file, or a stored draft. Viewers may lint.

``POST /workspaces/{workspace}/lint`` takes the body ``apply`` takes and
answers what ``crank lint`` prints: validation errors as ``spec-invalid``
findings and every lint finding, without writing anything. Agents are linted
against the file's operations and, for operations the file does not hold, the
workspace's (latest published version, else draft). The file's ``workspace``
is not checked: nothing is written, so nothing can go to the wrong place.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import get, post
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from control_plane.api_document import AgentSlugPath, OperationNamePath
from control_plane.auth import Role
from control_plane.deps import CurrentWorkspace, DbConn
from control_plane.lint import Finding
from control_plane.services.agents import lint_agent_draft, require_agent
from control_plane.services.apply import lint_in_workspace
from control_plane.services.operations import lint_stored, require_operation
from shared.engine.spec import CrankFile


class LintReport(msgspec.Struct, kw_only=True):
    findings: list[Finding]


@post(
    "/workspaces/{workspace:str}/lint",
    access=Role.VIEWER,
    status_code=HTTP_200_OK,
    tags=["lint"],
    summary="Lint an operation file (the apply body) without writing anything",
    description=(
        "Answers `{findings}`: the file's validation errors as `spec-invalid` findings, then "
        "every lint finding. Any finding with severity `error` would refuse an apply or a "
        "publish. Needs the viewer role."
    ),
)
async def lint_file_route(
    ws: CurrentWorkspace, data: JSONBody[CrankFile], conn: DbConn
) -> LintReport:
    return LintReport(findings=await lint_in_workspace(conn, ws, data))


@get(
    "/workspaces/{workspace:str}/operations/{name:str}/lint",
    access=Role.VIEWER,
    tags=["lint"],
    summary="Lint an operation's draft",
)
async def lint_operation_draft(
    ws: CurrentWorkspace, name: OperationNamePath, conn: DbConn
) -> LintReport:
    row = await require_operation(conn, ws, name)
    return LintReport(findings=lint_stored(row.draft))


@get(
    "/workspaces/{workspace:str}/agents/{slug:str}/lint",
    access=Role.VIEWER,
    tags=["lint"],
    summary="Lint an agent's draft against the operations it binds",
)
async def lint_agent_route(ws: CurrentWorkspace, slug: AgentSlugPath, conn: DbConn) -> LintReport:
    row = await require_agent(conn, ws, slug)
    return LintReport(findings=await lint_agent_draft(conn, ws, row.draft))


handlers: list[Any] = [lint_file_route, lint_operation_draft, lint_agent_route]
