"""``POST /api/v1/workspaces/{workspace}/operations/{name}/try``: run a draft once.

The editor role: a try-it makes a real upstream call with the workspace's
secrets, under its egress policy. The pipeline, the masking and the audit row
are control_plane.services.try_it. Unlike the other routes, the handler commits
its transaction before the upstream call (and the ``operation.try`` audit row
with it, written for every try), so no transaction waits on an upstream.
"""

from __future__ import annotations

from typing import Any

from litestar import post
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from control_plane.api_document import OperationNamePath, body_example
from control_plane.auth import Role
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.services.try_it import TryReport, TryRequest, try_operation

body_example(TryRequest, "A GET tried with one argument", {"arguments": {"order_id": "A-1001"}})


@post(
    "/workspaces/{workspace:str}/operations/{name:str}/try",
    access=Role.EDITOR,
    status_code=HTTP_200_OK,
    tags=["operations"],
    summary="Try the draft: call its upstream once with sample arguments",
    description=(
        "Runs the draft through the gateway's pipeline (validate, build, SSRF guard, call, "
        "select) and answers the request as sent, the upstream's status, headers and raw body "
        "(capped at 64 KiB) and the selected result, secrets masked. `select` replaces the "
        "draft's `response.select` for this try. A pipeline failure is the result "
        "(`is_error: true`, the structured tool error), still 200. Anything but GET makes a "
        "real call: it needs `acknowledge_side_effects: true` (else 400 "
        "`acknowledgement_required`, and no call). Every try, GET included, writes an "
        "`operation.try` audit entry (method, host, outcome). The call obeys the workspace's "
        "egress policy. Confirmation and approval do not apply. Needs the editor role."
    ),
)
async def try_operation_draft(
    ws: CurrentWorkspace,
    name: OperationNamePath,
    data: JSONBody[TryRequest],
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
) -> TryReport:
    return await try_operation(conn, app_state, ws, principal.actor, name, data)


handlers: list[Any] = [try_operation_draft]
