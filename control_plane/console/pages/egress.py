"""The Egress page: what the workspace's operations may call (docs/architecture.md,
"Egress per workspace").

Everyone with access reads it. Owners replace the host list (it only narrows what
the operator allows); instance admins replace the private grants, as in the admin
API (control_plane/routes/egress.py). Both forms carry the policy's ETag, so a
write based on a page someone else has since changed writes nothing and says so.
One entry per line; the services judge the entries and a refusal names each bad
one next to its field. Instance admins also see the operator's settings that bound
every workspace, since a grant outside them reaches nothing.
"""

from __future__ import annotations

from typing import Any

from litestar import Request, get, post
from litestar.params import FromQuery
from litestar.response import Redirect, Template

from control_plane.auth import Role, Workspace
from control_plane.console.forms import (
    STALE_MESSAGE,
    field_errors,
    is_stale,
    precondition,
    read_form,
    text,
)
from control_plane.console.outcomes import done as done_redirect
from control_plane.console.rendering import may_write, page
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.errors import ApiError, ValidationFailed
from control_plane.services.egress import read_egress, set_grants, set_hosts
from control_plane.services.egress_remedy import egress_page
from shared.db import Connection
from shared.engine.egress import MAX_EGRESS_ENTRIES
from shared.settings import Settings

DONE = {
    "hosts": "Host list saved: the gateways apply it within a catalog refresh.",
    "grants": "Grants saved: the gateways apply them within a catalog refresh.",
}


def _lines(raw: str) -> list[str]:
    """One entry per line; blank lines and surrounding spaces do not count."""
    return [line.strip() for line in raw.splitlines() if line.strip()]


def _operator(settings: Settings) -> dict[str, Any]:
    """The operator's settings that bound every workspace: shown to instance admins
    only (a tenant is not told what the instance allows others)."""
    return {
        "allow_private": settings.allow_private_upstreams,
        "allow_loopback": settings.allow_loopback_upstreams,
        "allowlist": list(settings.upstream_allowlist),
    }


async def _egress_page(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    settings: Settings,
    *,
    status_code: int = 200,
    errors: dict[str, str] | None = None,
    submitted: dict[str, Any] | None = None,
    stale: bool = False,
    done: str = "",
) -> Template:
    row = await read_egress(conn, ws)
    form = {
        "any_host": row.hosts is None,
        "hosts": "\n".join(row.hosts or []),
        "grants": "\n".join(row.grants),
        **(submitted or {}),
    }
    return page(
        request,
        "egress.html",
        status_code=status_code,
        egress=row,
        etag=row.etag,
        form=form,
        errors=errors or {},
        stale=STALE_MESSAGE if stale else "",
        done=DONE.get(done, ""),
        can_grant=may_write(ws, Role.INSTANCE_ADMIN),
        operator=_operator(settings) if may_write(ws, Role.INSTANCE_ADMIN) else None,
        max_entries=MAX_EGRESS_ENTRIES,
    )


async def _refused(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    settings: Settings,
    exc: ApiError,
    submitted: dict[str, Any],
) -> Template:
    """A write that wrote nothing: a stale page (409, the current policy shown) or
    entries that do not parse (400, what was typed kept)."""
    if is_stale(exc):
        return await _egress_page(request, ws, conn, settings, status_code=409, stale=True)
    if not isinstance(exc, ValidationFailed):
        raise exc
    errors = field_errors(exc)
    return await _egress_page(
        request, ws, conn, settings, status_code=400, errors=errors, submitted=submitted
    )


@get("/w/{workspace:str}/egress", access=Role.VIEWER)
async def egress(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    app_state: CrankState,
    done: FromQuery[str] = "",
) -> Template:
    return await _egress_page(request, ws, conn, app_state.settings, done=done)


@post("/w/{workspace:str}/egress/hosts", access=Role.OWNER)
async def store_hosts(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
) -> Template | Redirect:
    form = await read_form(request)
    any_host = text(form, "any_host") == "on"
    typed = text(form, "hosts")
    hosts = None if any_host else _lines(typed)
    submitted = {"any_host": any_host, "hosts": typed}
    try:
        await set_hosts(conn, ws, principal.actor, hosts, precondition(form))
    except ApiError as exc:
        return await _refused(request, ws, conn, app_state.settings, exc, submitted)
    return done_redirect(egress_page(ws.slug), "hosts")


@post("/w/{workspace:str}/egress/grants", access=Role.INSTANCE_ADMIN)
async def store_grants(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
) -> Template | Redirect:
    form = await read_form(request)
    typed = text(form, "grants")
    submitted = {"grants": typed}
    try:
        await set_grants(conn, ws, principal.actor, _lines(typed), precondition(form))
    except ApiError as exc:
        return await _refused(request, ws, conn, app_state.settings, exc, submitted)
    return done_redirect(egress_page(ws.slug), "grants")


handlers: list[Any] = [egress, store_hosts, store_grants]
