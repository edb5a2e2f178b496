"""The API keys page: every key of the workspace by its prefix; owners create and
revoke keys, as in the admin API (control_plane/routes/keys.py).

A new key is in the answer to the POST that created it and nowhere else: never
in a URL (no redirect carries it), never in a log, never on a later page.
Agent keys are for MCP clients; approval keys are for the human approver's
interface and must never reach a model.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import msgspec
from litestar import Request, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from control_plane.auth import Role, Workspace
from control_plane.console.forms import field_errors, read_form, text
from control_plane.console.mcp_clients import endpoint
from control_plane.console.outcomes import confirmation
from control_plane.console.outcomes import done as done_redirect
from control_plane.console.rendering import page
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.errors import NotFound, ValidationFailed
from control_plane.routes.keys import KeyCreate
from control_plane.services.agents import list_agents
from control_plane.services.keys import (
    IssuedKey,
    KeyView,
    create_api_key,
    list_api_keys,
    revoke_api_key,
)
from shared.db import Connection
from shared.engine.spec_validation import FieldError, decode_error_to_field
from shared.settings import Settings

MAX_EXPIRY_DAYS = 3650
DONE = {"revoked": "Key revoked: every gateway refuses it from now on."}


def _keys_path(ws: Workspace) -> str:
    return f"/ui/w/{ws.slug}/keys"


async def _keys_page(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    *,
    status_code: int = 200,
    issued: IssuedKey | None = None,
    errors: dict[str, str] | None = None,
    form: dict[str, str] | None = None,
    done: str = "",
    settings: Settings | None = None,
) -> Template:
    inbox = (
        endpoint(settings.public_url, settings.public_path_prefix, ws.slug, issued.agent)
        if issued is not None and settings is not None
        else None
    )
    return page(
        request,
        "keys.html",
        status_code=status_code,
        keys=await list_api_keys(conn, ws.id),
        agents=[row.slug for row in await list_agents(conn, ws.id)],
        issued=issued,
        inbox=inbox,
        errors=errors or {},
        form=form or {"kind": "agent"},
        done=DONE.get(done, ""),
        now=datetime.now(UTC),
    )


@get("/w/{workspace:str}/keys", access=Role.VIEWER)
async def keys(
    request: Request[Any, Any, Any], ws: CurrentWorkspace, conn: DbConn, done: FromQuery[str] = ""
) -> Template:
    return await _keys_page(request, ws, conn, done=done)


def _expiry(days: str) -> datetime | None:
    """The expiry ``days`` from now; None when the field is empty (never expires)."""
    if not days:
        return None
    if not days.isdigit() or not 1 <= int(days) <= MAX_EXPIRY_DAYS:
        raise ValidationFailed(
            [FieldError("expires_days", f"a whole number of days, 1 to {MAX_EXPIRY_DAYS}")]
        )
    return datetime.now(UTC) + timedelta(days=int(days))


@post("/w/{workspace:str}/keys", access=Role.OWNER)
async def create(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
) -> Template:
    form = await read_form(request)
    submitted = {name: text(form, name) for name in ("agent", "kind", "name", "expires_days")}
    try:
        try:  # the admin API's own body type, so its limits hold here too
            wanted = msgspec.convert(
                {
                    "agent": submitted["agent"],
                    "kind": submitted["kind"] or "agent",
                    "name": submitted["name"],
                    "expires_at": _expiry(submitted["expires_days"]),
                },
                KeyCreate,
            )
        except msgspec.ValidationError as exc:
            raise ValidationFailed([decode_error_to_field(exc)]) from None
        issued = await create_api_key(
            conn,
            app_state.hasher,
            ws,
            principal.actor,
            agent=wanted.agent,
            kind=wanted.kind,
            name=wanted.name,
            expires_at=wanted.expires_at,
        )
    except ValidationFailed as exc:
        errors = field_errors(exc)
        if "expires_at" in errors:
            errors["expires_days"] = errors.pop("expires_at")
        return await _keys_page(request, ws, conn, status_code=400, errors=errors, form=submitted)
    # The form keeps the agent and kind just used: the next key is often for the same agent.
    return await _keys_page(
        request,
        ws,
        conn,
        status_code=201,
        issued=issued,
        form={"agent": issued.agent, "kind": issued.kind},
        settings=app_state.settings,
    )


async def _key(conn: Connection, ws: Workspace, key_id: int) -> KeyView:
    for key in await list_api_keys(conn, ws.id):
        if key.id == key_id:
            return key
    raise NotFound(f"key {key_id} not found in workspace {ws.slug!r}")


@get("/w/{workspace:str}/keys/{key_id:int}/revoke", access=Role.OWNER)
async def confirm_revoke(
    request: Request[Any, Any, Any], ws: CurrentWorkspace, key_id: FromPath[int], conn: DbConn
) -> Template:
    key = await _key(conn, ws, key_id)
    kind = "approval key" if key.kind == "approval" else "agent key"
    return confirmation(
        request,
        heading="Revoke API key",
        question=(
            f"Revoke the {kind} {key.prefix}… of agent {key.agent}"
            f"{f' ({key.name})' if key.name else ''}? Every gateway refuses it at once; "
            "whatever uses it stops working. This cannot be undone."
        ),
        action=f"{_keys_path(ws)}/{key.id}/revoke",
        button="Revoke key",
        cancel=_keys_path(ws),
    )


@post("/w/{workspace:str}/keys/{key_id:int}/revoke", access=Role.OWNER)
async def revoke(
    ws: CurrentWorkspace, key_id: FromPath[int], conn: DbConn, principal: Caller
) -> Redirect:
    await revoke_api_key(conn, ws, principal.actor, key_id)
    return done_redirect(_keys_path(ws), "revoked")


handlers: list[Any] = [keys, create, confirm_revoke, revoke]
