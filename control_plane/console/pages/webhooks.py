"""An agent's webhook subscriptions on its page: create (the signing secret shown
this once) and revoke, after a confirmation. Editors write, as in the admin API
(control_plane/routes/webhooks.py); subscriptions are listed on the agent's page."""

from __future__ import annotations

from typing import Any

from litestar import Request, get, post
from litestar.params import FromPath
from litestar.response import Redirect, Template

from control_plane.auth import Role
from control_plane.console.forms import field_errors, read_form, text, values
from control_plane.console.outcomes import confirmation
from control_plane.console.outcomes import done as done_redirect
from control_plane.console.pages.agents import agent_page, agent_path
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.errors import ValidationFailed
from control_plane.services.agents import require_agent
from control_plane.services.webhooks import create_webhook, get_webhook, revoke_webhook
from shared.engine.spec import WebhookSpec

_PATH = "/w/{workspace:str}/agents/{slug:str}/webhooks"


@post(_PATH, access=Role.EDITOR)
async def create(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    slug: FromPath[str],
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
) -> Template:
    form = await read_form(request)
    spec = WebhookSpec(
        url=text(form, "url"),
        events=values(form, "events"),
        format=text(form, "format") or "standard",
    )
    submitted = {"url": spec.url, "events": spec.events, "format": spec.format}
    row = await require_agent(conn, ws, slug)
    try:
        created = await create_webhook(conn, app_state.box, ws, principal.actor, slug, spec)
    except ValidationFailed as exc:
        return await agent_page(
            request,
            ws,
            conn,
            app_state,
            row,
            status_code=400,
            webhook_form=submitted,
            webhook_errors=field_errors(exc),
        )
    return await agent_page(request, ws, conn, app_state, row, new_webhook=created)


@get(f"{_PATH}/{{webhook_id:str}}/revoke", access=Role.EDITOR)
async def confirm_revoke(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    slug: FromPath[str],
    webhook_id: FromPath[str],
    conn: DbConn,
) -> Template:
    subscription = await get_webhook(conn, ws, slug, webhook_id)
    return confirmation(
        request,
        heading="Revoke webhook subscription",
        question=(
            f"Revoke {subscription.id}, which sends {', '.join(subscription.events)} of agent "
            f"{slug} to {subscription.url}? Deliveries not yet made fail; this cannot be undone."
        ),
        action=f"{agent_path(ws, slug)}/webhooks/{subscription.id}/revoke",
        button="Revoke subscription",
        cancel=agent_path(ws, slug),
    )


@post(f"{_PATH}/{{webhook_id:str}}/revoke", access=Role.EDITOR)
async def revoke(
    ws: CurrentWorkspace,
    slug: FromPath[str],
    webhook_id: FromPath[str],
    conn: DbConn,
    principal: Caller,
) -> Redirect:
    await revoke_webhook(conn, ws, principal.actor, slug, webhook_id)
    return done_redirect(agent_path(ws, slug), "webhook_revoked")


handlers: list[Any] = [create, confirm_revoke, revoke]
