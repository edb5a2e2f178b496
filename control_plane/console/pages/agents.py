"""The Agents pages: the list, creating an agent, and an agent's page (its draft,
the operations it binds, publish and unpublish, its MCP endpoint and client
configurations). Reads need the viewer role, writes the editor role, as in the
admin API (control_plane/routes/agents.py); every write names the ETag the page
was rendered with, so a draft changed meanwhile is never overwritten. The draft's
form also holds the agent's ``auth``: the workspace's identity providers whose
tokens it accepts, whether agent keys are, and the scopes every caller needs
(docs/architecture.md, "Identity")."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec
from litestar import Request, get, post
from litestar.datastructures import FormMultiDict
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from control_plane.auth import Role, Workspace
from control_plane.console.forms import (
    STALE_MESSAGE,
    errors_at,
    field_errors,
    is_stale,
    precondition,
    read_form,
    text,
    values,
    word_list,
)
from control_plane.console.mcp_clients import approver_snippet, client_snippets, endpoint
from control_plane.console.outcomes import done as done_redirect
from control_plane.console.rendering import page
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.errors import ApiError, Conflict, LintFailed, ValidationFailed
from control_plane.etag import etag
from control_plane.lint import Finding
from control_plane.services.agents import (
    AgentPublishResult,
    AgentRow,
    create_agent,
    list_agents,
    publish_agent,
    publish_report,
    published_state,
    require_agent,
    unpublish_agent,
    update_agent_draft,
)
from control_plane.services.identity_providers import list_providers
from control_plane.services.keys import list_api_keys
from control_plane.services.operations import OperationSummary, list_operations
from control_plane.services.webhooks import CreatedWebhook, list_webhooks
from control_plane.state import AppState
from shared.db import Connection
from shared.engine.spec import (
    WEBHOOK_EVENTS,
    WEBHOOK_FORMATS,
    AgentAuth,
    AgentSpec,
    agent_from_builtins,
)

# What a redirect after a write says on the page it lands on (a fixed word, never text
# from the request, so the URL cannot put words on the page).
DONE = {
    "created": "Agent created. Bind its operations, then publish it.",
    "saved": "Draft saved. Publish it to serve the change.",
    "unpublished": "Unpublished: the gateways no longer serve this agent.",
    "webhook_revoked": "Webhook subscription revoked.",
}
# The draft form's fields, named by the spec's paths so the service's errors land beside them.
DRAFT_FIELDS = (
    "title",
    "description",
    "operations",
    "auth.providers",
    "auth.agent_keys",
    "auth.scopes",
)
# The words a publish redirects with: the page then shows the publish's report.
PUBLISHED = {"published": True, "unchanged": False}  # word -> whether a version was made


def agent_path(ws: Workspace, slug: str) -> str:
    return f"/ui/w/{ws.slug}/agents/{slug}"


def keep_order(stored: list[str], checked: list[str]) -> list[str]:
    """The checked names, in the order the agent had them; newly checked ones follow in
    the page's order."""
    kept = [name for name in stored if name in checked]
    return kept + [name for name in dict.fromkeys(checked) if name not in kept]


def auth_values(auth: AgentAuth) -> dict[str, Any]:
    """An agent's ``auth`` as the draft form's fields hold it."""
    return {
        "providers": list(auth.providers),
        "agent_keys": auth.agent_keys,
        "scopes": " ".join(auth.scopes),
    }


def state_of(row: AgentRow) -> str:
    """draft | published | changed (published, and the draft differs since)."""
    if row.published is None:
        return "draft"
    return "published" if published_state(row.draft) == row.published else "changed"


async def all_operations(conn: Connection, workspace_id: int) -> list[OperationSummary]:
    found: list[OperationSummary] = []
    after: str | None = None
    while True:
        items, after = await list_operations(conn, workspace_id, after=after, limit=500)
        found.extend(items)
        if after is None:
            return found


@dataclass(frozen=True, slots=True)
class Binding:
    """One operation the agent may bind: its name, whether it is bound, its state."""

    name: str
    title: str
    bound: bool
    state: str  # published | changed | unpublished | missing
    version: int | None


def bindings(bound: list[str], operations: list[OperationSummary]) -> list[Binding]:
    known = {op.name for op in operations}
    rows = [
        Binding(
            name=op.name,
            title=op.title or "",
            bound=op.name in bound,
            state="unpublished"
            if op.latest_version is None
            else ("changed" if op.draft_changed else "published"),
            version=op.latest_version,
        )
        for op in operations
    ]
    missing = [Binding(n, "", True, "missing", None) for n in bound if n not in known]
    return missing + rows


async def _agents_page(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    *,
    status_code: int = 200,
    errors: dict[str, str] | None = None,
    form: dict[str, str] | None = None,
) -> Template:
    rows = await list_agents(conn, ws.id)
    return page(
        request,
        "agents.html",
        status_code=status_code,
        agents=[(row, state_of(row)) for row in rows],
        errors=errors or {},
        form=form or {},
    )


@get("/w/{workspace:str}/agents", access=Role.VIEWER)
async def agents(request: Request[Any, Any, Any], ws: CurrentWorkspace, conn: DbConn) -> Template:
    return await _agents_page(request, ws, conn)


@post("/w/{workspace:str}/agents", access=Role.EDITOR)
async def create(
    request: Request[Any, Any, Any], ws: CurrentWorkspace, conn: DbConn, principal: Caller
) -> Template | Redirect:
    form = await read_form(request)
    fields = {name: text(form, name) for name in ("slug", "title", "description")}
    spec = AgentSpec(slug=fields["slug"], title=fields["title"], description=fields["description"])
    try:
        row = await create_agent(conn, ws, principal.actor, spec)
    except (ValidationFailed, Conflict) as exc:
        if isinstance(exc, Conflict) and exc.code != "already_exists":
            raise
        taken = isinstance(exc, Conflict)
        return await _agents_page(
            request,
            ws,
            conn,
            status_code=409 if taken else 400,
            errors={"slug": exc.message} if taken else field_errors(exc),
            form=fields,
        )
    return done_redirect(agent_path(ws, row.slug), "created")


async def agent_page(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    app_state: AppState,
    row: AgentRow,
    *,
    status_code: int = 200,
    done: str = "",
    stale: bool = False,
    errors: dict[str, str] | None = None,
    draft_form: dict[str, Any] | None = None,
    outcome: AgentPublishResult | None = None,
    lint_errors: list[Finding] | None = None,
    webhook_form: dict[str, Any] | None = None,
    webhook_errors: dict[str, str] | None = None,
    new_webhook: CreatedWebhook | None = None,
) -> Template:
    draft = agent_from_builtins(row.draft)
    settings = app_state.settings
    target = endpoint(settings.public_url, settings.public_path_prefix, ws.slug, row.slug)
    bound = draft_form["operations"] if draft_form else draft.operations
    return page(
        request,
        "agent.html",
        status_code=status_code,
        agent=row,
        draft=draft,
        state=state_of(row),
        etag=etag(row.id, row.revision),
        draft_form=draft_form
        or {"title": draft.title, "description": draft.description, **auth_values(draft.auth)},
        bindings=bindings(bound, await all_operations(conn, ws.id)),
        providers=await list_providers(conn, ws),
        done=DONE.get(done, ""),
        stale=STALE_MESSAGE if stale else "",
        errors=errors or {},
        outcome=outcome,
        lint_errors=lint_errors or [],
        endpoint=target,
        snippets=client_snippets(target, ws.slug, row.slug),
        approver=approver_snippet(target),
        keys=await list_api_keys(conn, ws.id, row.slug),
        webhooks=await list_webhooks(conn, ws, row.slug),
        webhook_form=webhook_form or {"url": "", "events": list(WEBHOOK_EVENTS), "format": ""},
        webhook_errors=webhook_errors or {},
        new_webhook=new_webhook,
        webhook_events=WEBHOOK_EVENTS,
        webhook_formats=WEBHOOK_FORMATS,
    )


@get("/w/{workspace:str}/agents/{slug:str}", access=Role.VIEWER)
async def agent(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    slug: FromPath[str],
    conn: DbConn,
    app_state: CrankState,
    done: FromQuery[str] = "",
) -> Template:
    row = await require_agent(conn, ws, slug)
    outcome = None
    if done in PUBLISHED and row.published is not None:
        outcome = await publish_report(conn, ws, row, changed=PUBLISHED[done])
    return await agent_page(request, ws, conn, app_state, row, done=done, outcome=outcome)


def _posted_auth(form: FormMultiDict, stored: AgentAuth) -> AgentAuth:
    """The ``auth`` the draft form posted. Agent keys are a yes/no choice, so a form
    without it (an older page) keeps the stored answer rather than turning them off."""
    keys = text(form, "auth.agent_keys")
    return AgentAuth(
        providers=keep_order(stored.providers, values(form, "auth.providers")),
        agent_keys=stored.agent_keys if keys not in ("yes", "no") else keys == "yes",
        scopes=word_list(text(form, "auth.scopes")),
    )


@post("/w/{workspace:str}/agents/{slug:str}", access=Role.EDITOR)
async def save_draft(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    slug: FromPath[str],
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
) -> Template | Redirect:
    form = await read_form(request)
    expected = precondition(form)
    current = await require_agent(conn, ws, slug)
    stored = agent_from_builtins(current.draft)
    operations = keep_order(stored.operations, values(form, "operations"))
    auth = _posted_auth(form, stored.auth)
    submitted = {
        "title": text(form, "title"),
        "description": text(form, "description"),
        "operations": operations,
        **auth_values(auth),
    }
    spec = msgspec.structs.replace(
        stored,
        title=submitted["title"],
        description=submitted["description"],
        operations=operations,
        auth=auth,
    )
    try:
        await update_agent_draft(conn, ws, principal.actor, slug, spec, expected)
    except ApiError as exc:
        if is_stale(exc):  # the current draft, not the one the change was based on
            return await agent_page(
                request, ws, conn, app_state, current, status_code=409, stale=True
            )
        if not isinstance(exc, ValidationFailed):
            raise
        return await agent_page(
            request,
            ws,
            conn,
            app_state,
            current,
            status_code=400,
            errors=errors_at(exc, DRAFT_FIELDS),
            draft_form=submitted,
        )
    return done_redirect(agent_path(ws, slug), "saved")


async def _refused(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    app_state: AppState,
    slug: str,
    exc: ApiError,
) -> Template:
    """The agent's current page after a publish or unpublish that wrote nothing: a stale
    page (409) or lint errors that block publishing (422)."""
    row = await require_agent(conn, ws, slug)
    return await agent_page(
        request,
        ws,
        conn,
        app_state,
        row,
        status_code=409 if is_stale(exc) else 422,
        stale=is_stale(exc),
        lint_errors=exc.findings if isinstance(exc, LintFailed) else [],
    )


@post("/w/{workspace:str}/agents/{slug:str}/publish", access=Role.EDITOR)
async def publish(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    slug: FromPath[str],
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
) -> Template | Redirect:
    expected = precondition(await read_form(request))
    try:
        outcome = await publish_agent(conn, ws, principal.actor, slug, expected)
    except ApiError as exc:
        if not (isinstance(exc, LintFailed) or is_stale(exc)):
            raise
        return await _refused(request, ws, conn, app_state, slug, exc)
    # Redirect after POST: a reload of the page shows the report, not a second publish.
    return done_redirect(agent_path(ws, slug), "published" if outcome.changed else "unchanged")


@post("/w/{workspace:str}/agents/{slug:str}/unpublish", access=Role.EDITOR)
async def unpublish(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    slug: FromPath[str],
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
) -> Template | Redirect:
    expected = precondition(await read_form(request))
    try:
        await unpublish_agent(conn, ws, principal.actor, slug, expected)
    except ApiError as exc:
        if not is_stale(exc):
            raise
        return await _refused(request, ws, conn, app_state, slug, exc)
    return done_redirect(agent_path(ws, slug), "unpublished")


handlers: list[Any] = [agents, create, agent, save_draft, publish, unpublish]
