"""``POST /api/v1/workspaces/{workspace}/apply``: what ``crank apply`` calls.

The body is an operation file (JSON). Its ``workspace`` is optional: omitted
(``null``), the file goes to the path's workspace, so one file without it can
be applied to several workspaces; naming any other workspace than the path's
— ``default`` included — is refused with ``400 workspace_mismatch``.
No ``If-Match``: the file states the whole desired draft, and the apply
serializes with every other writer through row locks instead.
"""

from __future__ import annotations

from typing import Any

from litestar import post
from litestar.params import FromQuery, JSONBody
from litestar.status_codes import HTTP_200_OK

from control_plane.auth import Role
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.errors import BadRequest, LintFailed, ValidationFailed
from control_plane.lint import has_errors
from control_plane.request_body import BodyLimit
from control_plane.services.apply import apply_file
from control_plane.services.apply_plan import ApplyPlan
from shared.engine.spec import CrankFile
from shared.engine.spec_validation import FieldError


@post(
    "/workspaces/{workspace:str}/apply",
    access=Role.EDITOR,
    body_limit=BodyLimit.DOCUMENT,
    status_code=HTTP_200_OK,
    tags=["apply"],
    errors=[LintFailed],
    summary="Apply an operation file: create, update and optionally publish",
    description=(
        "Idempotent: a second apply of the same file reports every resource unchanged "
        "and writes nothing. `dry_run` reports the same plan and writes nothing. A file "
        "with errors gets 400 `validation_failed` with paths into the file, one with lint "
        "errors 422 `lint_failed` with the linter's `findings`; either changes nothing. "
        "Lint warnings are in the plan's `findings`."
    ),
)
async def apply_operation_file(
    ws: CurrentWorkspace,
    data: JSONBody[CrankFile],
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
    publish: FromQuery[bool] = False,
    dry_run: FromQuery[bool] = False,
) -> ApplyPlan:
    if data.workspace is not None and data.workspace != ws.slug:
        raise BadRequest(
            f"the file is for workspace {data.workspace!r} but was sent to {ws.slug!r}",
            code="workspace_mismatch",
            errors=[FieldError("workspace", f"must be {ws.slug!r} or omitted")],
        )
    plan = await apply_file(
        conn, ws, principal.actor, data, publish=publish, dry_run=dry_run, box=app_state.box
    )
    if plan.errors and has_errors(plan.findings):
        raise LintFailed(plan.errors, plan.findings, "the file", outcome="nothing was applied")
    if plan.errors:
        raise ValidationFailed(plan.errors)
    return plan


handlers: list[Any] = [apply_operation_file]
