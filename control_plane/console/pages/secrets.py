"""The Secrets page: names and times only; values are write-only.

Editors set, replace and delete secrets, as in the admin API
(control_plane/routes/secrets.py, docs/admin-api.md "Roles"). A value goes in
through a password input and is never rendered back, not even into the form
of a refused write.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, get, post
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from control_plane.auth import Role, Workspace
from control_plane.console.forms import field_errors, read_form, text
from control_plane.console.outcomes import confirmation
from control_plane.console.outcomes import done as done_redirect
from control_plane.console.rendering import page
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.errors import NotFound, ValidationFailed
from control_plane.services.secrets import (
    MAX_SECRET_BYTES,
    delete_secret,
    list_secrets,
    set_secret,
)
from shared.db import Connection

DONE = {
    "created": "Secret stored.",
    "replaced": "Secret replaced: the gateways use the new value from now on.",
    "unchanged": "The secret already held that value; nothing changed.",
    "deleted": "Secret deleted.",
}


def _secrets_path(ws: Workspace) -> str:
    return f"/ui/w/{ws.slug}/secrets"


async def _secrets_page(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    *,
    status_code: int = 200,
    errors: dict[str, str] | None = None,
    name: str = "",
    done: str = "",
) -> Template:
    return page(
        request,
        "secrets.html",
        status_code=status_code,
        secrets=await list_secrets(conn, ws.id),
        errors=errors or {},
        name=name,
        done=DONE.get(done, ""),
        max_bytes=MAX_SECRET_BYTES,
    )


@get("/w/{workspace:str}/secrets", access=Role.VIEWER)
async def secrets(
    request: Request[Any, Any, Any], ws: CurrentWorkspace, conn: DbConn, done: FromQuery[str] = ""
) -> Template:
    return await _secrets_page(request, ws, conn, done=done)


@post("/w/{workspace:str}/secrets", access=Role.EDITOR)
async def store(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
) -> Template | Redirect:
    form = await read_form(request)
    name = text(form, "name")
    value = form.get("value", "")
    try:
        stored = await set_secret(
            conn, app_state.box, ws, principal.actor, name, value if isinstance(value, str) else ""
        )
    except ValidationFailed as exc:
        return await _secrets_page(
            request, ws, conn, status_code=400, errors=field_errors(exc), name=name
        )
    done = "created" if stored.created else ("replaced" if stored.changed else "unchanged")
    return done_redirect(_secrets_path(ws), done)


@get("/w/{workspace:str}/secrets/{name:str}/delete", access=Role.EDITOR)
async def confirm_delete(
    request: Request[Any, Any, Any], ws: CurrentWorkspace, name: FromPath[str], conn: DbConn
) -> Template:
    if name not in {secret.name for secret in await list_secrets(conn, ws.id)}:
        raise NotFound(f"secret {name!r} not found in workspace {ws.slug!r}")
    return confirmation(
        request,
        heading="Delete secret",
        question=(
            f"Delete the secret {name}? Operations that name it in request.auth fail "
            "until it is set again."
        ),
        action=f"{_secrets_path(ws)}/{name}/delete",
        button="Delete secret",
        cancel=_secrets_path(ws),
    )


@post("/w/{workspace:str}/secrets/{name:str}/delete", access=Role.EDITOR)
async def delete(
    ws: CurrentWorkspace, name: FromPath[str], conn: DbConn, principal: Caller
) -> Redirect:
    await delete_secret(conn, ws, principal.actor, name)
    return done_redirect(_secrets_path(ws), "deleted")


handlers: list[Any] = [secrets, store, confirm_delete, delete]
