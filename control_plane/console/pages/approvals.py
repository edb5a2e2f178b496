"""The approvals pages: the workspace's approvals, one approval, an owner's decision.

Reading needs a viewer; deciding an owner (the route's ``access=``, whatever the
page showed). The decision is the gateway's own statement
(``shared.approval_decisions``, docs/architecture.md, "Approval decisions"):
audited, ``decided_by`` naming the admin, a row no longer pending answered
409 with its status.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
from litestar import Request, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, FromQuery
from litestar.response import Redirect, Template

from control_plane.auth import Role
from control_plane.console.forms import field_errors
from control_plane.console.listing import (
    HELPERS,
    PAGE_SIZE,
    blank_to_none,
    list_page,
)
from control_plane.console.rendering import page
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.errors import ValidationFailed
from control_plane.services.approvals import (
    ApprovalFilters,
    ApprovalList,
    NotPending,
    decide_approval,
    get_approval,
    list_approvals,
    masker_of,
)
from shared.approval_decisions import MAX_NOTE_CHARS
from shared.approval_records import STATUSES
from shared.engine.spec_validation import FieldError

_DECISIONS: dict[str, Literal["approved", "denied"]] = {"approve": "approved", "deny": "denied"}


class DecisionForm(msgspec.Struct, kw_only=True):
    decision: str = ""  # the button pressed: approve or deny
    note: str = ""


@get("/w/{workspace:str}/approvals", access=Role.VIEWER)
async def approvals(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    status: FromQuery[str] = "",
    agent: FromQuery[str] = "",
    tool: FromQuery[str] = "",
    cursor: FromQuery[str] = "",
) -> Template:
    form = {"status": status, "agent": agent, "tool": tool}

    async def load(at: str | None) -> ApprovalList:
        filters = ApprovalFilters(
            status=blank_to_none(status), agent=blank_to_none(agent), tool=blank_to_none(tool)
        )
        return await list_approvals(conn, ws.id, filters, limit=PAGE_SIZE, cursor=at)

    return await list_page(request, ws, "approvals", form, cursor, load, statuses=STATUSES)


async def _detail(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    app_state: CrankState,
    approval_id: str,
    *,
    status_code: int = 200,
    errors: dict[str, str] | None = None,
    note: str = "",
    message: str = "",
) -> Template:
    # Viewers see it too: masked with the workspace's secrets, like the API's record.
    found = await get_approval(
        conn, ws.id, approval_id, await masker_of(conn, app_state.box, ws.id)
    )
    return page(
        request,
        "approval.html",
        status_code=status_code,
        approval=found.record,
        agent=found.agent,
        overdue=found.overdue,
        errors=errors or {},
        note=note,
        message=message,
        max_note=MAX_NOTE_CHARS,
        **HELPERS,
    )


@get("/w/{workspace:str}/approvals/{approval_id:str}", access=Role.VIEWER)
async def approval(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    app_state: CrankState,
    approval_id: FromPath[str],
) -> Template:
    return await _detail(request, ws, conn, app_state, approval_id)


@post("/w/{workspace:str}/approvals/{approval_id:str}/decide", access=Role.OWNER)
async def decide(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    principal: Caller,
    conn: DbConn,
    app_state: CrankState,
    approval_id: FromPath[str],
    data: Annotated[DecisionForm, Body(media_type=RequestEncodingType.URL_ENCODED)],
) -> Template | Redirect:
    try:
        status = _DECISIONS.get(data.decision)
        if status is None:
            raise ValidationFailed([FieldError("decision", "press Approve or Deny")])
        masker = await masker_of(conn, app_state.box, ws.id)
        await decide_approval(conn, ws, principal, approval_id, status, data.note, masker)
    except ValidationFailed as exc:
        return await _detail(
            request,
            ws,
            conn,
            app_state,
            approval_id,
            status_code=400,
            errors=field_errors(exc),
            note=data.note,
        )
    except NotPending as exc:  # handled, not raised: an overdue row's expiry still commits
        return await _detail(
            request, ws, conn, app_state, approval_id, status_code=409, message=exc.message
        )
    return Redirect(f"/ui/w/{ws.slug}/approvals/{approval_id}", status_code=303)


handlers: list[Any] = [approvals, approval, decide]
