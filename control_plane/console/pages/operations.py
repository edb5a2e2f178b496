"""The Operations pages: the list (state, method and URL, lint counts, filters), one
operation (its draft, lint findings, versions, a diff of any two of its specs) and
the editor's writes: publish the draft, discard it, roll back to a version.

Every write goes through ``control_plane.services.operations``, the admin API's
service, with the ETag the page was rendered with (a hidden field): a stale one
is a 409 page that says someone else changed the operation, never an overwrite
(docs/architecture.md, "The console"). Creating and editing a draft is the
wizard's (pages/wizard.py); these pages link to it.
"""

from __future__ import annotations

from typing import Annotated, Any, Final
from urllib.parse import quote, urlencode

import msgspec
from litestar import Request, get, post
from litestar.enums import RequestEncodingType
from litestar.params import Body, FromPath, FromQuery, QueryParameter
from litestar.response import Redirect, Template

from control_plane.auth import Role, Workspace
from control_plane.console import operation_views as views
from control_plane.console.forms import expected_revision
from control_plane.console.rendering import TO_MESSAGES, is_htmx, page, wants_fragment
from control_plane.deps import Caller, CurrentWorkspace, DbConn
from control_plane.errors import ApiError, Conflict, LintFailed, ValidationFailed
from control_plane.etag import etag
from control_plane.lint import Finding
from control_plane.services import operations as service
from shared.db import Connection

PAGE_SIZE: Final = 100
MAX_FILTER_TEXT: Final = 200
RESULTS_TARGET: Final = "operation-results"  # the list's region htmx re-renders
DIFF_TARGET: Final = "diff"  # the detail page's region htmx re-renders


class WriteForm(msgspec.Struct, kw_only=True):
    """A write's form: the ETag the page showed (``_csrf`` is the guard's)."""

    etag: Annotated[str, msgspec.Meta(max_length=60)] = ""


# The query's "state": a handler parameter may not be named ``state`` (Litestar's app state).
StateQuery = Annotated[str, QueryParameter(name="state")]
WriteBody = Annotated[WriteForm, Body(media_type=RequestEncodingType.URL_ENCODED)]


def operation_path(ws: Workspace, name: str) -> str:
    return f"/ui/w/{ws.slug}/operations/{quote(name, safe='')}"


# --- the list ---------------------------------------------------------------------------


def _filter_errors(state: str, q: str, after: str) -> dict[str, str]:
    """What is wrong with the list's query, by field (the form cannot send these)."""
    errors: dict[str, str] = {}
    if state and views.state_filter(state) is None:
        errors["state"] = "Choose one of the listed states."
    if len(q) > MAX_FILTER_TEXT:
        errors["q"] = f"Search for at most {MAX_FILTER_TEXT} characters."
    if len(after) > MAX_FILTER_TEXT:
        errors["after"] = "This page link is broken: start again from the first page."
    return errors


async def _gone(conn: Connection, ws: Workspace, name: str) -> str:
    """The discarded operation the link names, when it is indeed gone (a link can say
    anything; the page only repeats what is true)."""
    if not name or len(name) > MAX_FILTER_TEXT:
        return ""
    return name if await service.get_operation(conn, ws.id, name) is None else ""


@get("/w/{workspace:str}/operations", access=Role.VIEWER)
async def operation_list(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    publish_state: StateQuery = "",
    q: FromQuery[str] = "",
    after: FromQuery[str] = "",
    deleted: FromQuery[str] = "",
) -> Template:
    state = publish_state  # the query's "state" (see StateQuery)
    errors = _filter_errors(state, q, after)
    items: list[service.OperationSummary] = []
    next_cursor: str | None = None
    lint: dict[str, service.LintCounts] = {}
    if not errors:
        items, next_cursor = await service.list_operations(
            conn,
            ws.id,
            after=after or None,
            limit=PAGE_SIZE,
            state=views.state_filter(state),
            text=q.strip() or None,
        )
        lint = await service.draft_lint_counts(conn, ws.id, [item.name for item in items])
    filters = {key: value for key, value in (("state", state), ("q", q)) if value}
    next_href = (
        f"/ui/w/{ws.slug}/operations?{urlencode({**filters, 'after': next_cursor})}"
        if next_cursor
        else ""
    )
    template = (
        "operations_results.html"
        if wants_fragment(request, RESULTS_TARGET) and not errors
        else "operations.html"
    )
    return page(
        request,
        template,
        status_code=400 if errors else 200,
        items=items,
        lint=lint,
        views=views,
        state=state,
        q=q,
        paged=bool(after),
        first_href=f"/ui/w/{ws.slug}/operations" + (f"?{urlencode(filters)}" if filters else ""),
        next_href=next_href,
        errors=errors,
        deleted=await _gone(conn, ws, deleted),
        results_target=RESULTS_TARGET,
    )


# --- one operation ------------------------------------------------------------------------


_DONE: Final = {
    "published": "Published the draft as version {version}.",
    "unchanged": "Nothing to publish: the draft already is version {version}.",
    "rolled-back": "Rolled back: version {version} is published and the draft is the same.",
    "discarded": "Discarded the draft: it is version {version} again.",
}


def _notice(done: str, version: str) -> str:
    template = _DONE.get(done)
    if template is None or not (version.isascii() and version.isdigit() and len(version) < 10):
        return ""
    return template.format(version=int(version))


async def _comparison(
    conn: Connection,
    ws: Workspace,
    row: service.OperationRow,
    versions: list[service.VersionInfo],
    before_text: str,
    after_text: str,
) -> tuple[dict[str, Any], dict[str, str]]:
    """The diff the page shows, and field errors for a pick that is not a spec of it.

    Unpicked, it is the latest version against the draft: what publishing would change."""
    known = {v.version for v in versions}
    picked: dict[str, service.SpecRef] = {}
    errors: dict[str, str] = {}
    defaults: dict[str, service.SpecRef] = {
        "before": row.latest_version or service.DRAFT,
        "after": service.DRAFT,
    }
    for field, text in (("before", before_text), ("after", after_text)):
        ref = service.parse_spec_ref(text) if text else defaults[field]
        if ref is None or (ref != service.DRAFT and ref not in known):
            errors[field] = "Choose the draft or one of the published versions."
        else:
            picked[field] = ref
    if errors:
        return {"before": before_text, "after": after_text, "rows": [], "picked": False}, errors
    compared = await service.compare_operation(
        conn, ws, row.name, picked["before"], picked["after"]
    )
    return {
        "before": str(compared.before),
        "after": str(compared.after),
        "before_label": views.ref_label(compared.before),
        "after_label": views.ref_label(compared.after),
        "rows": views.diff_rows(compared.changes),
        "picked": True,
    }, errors


async def _detail(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    name: str,
    *,
    status_code: int = 200,
    before: str = "",
    after: str = "",
    notice: str = "",
    refusal: ApiError | None = None,
) -> Template:
    row = await service.require_operation(conn, ws, name)
    versions = await service.list_versions(conn, ws, name)
    diff, diff_errors = await _comparison(conn, ws, row, versions, before, after)
    findings: list[Finding] = service.lint_stored(row.draft)
    if diff_errors and status_code == 200:
        status_code = 400
    template = "operation_diff.html" if wants_fragment(request, DIFF_TARGET) else "operation.html"
    return page(
        request,
        template,
        status_code=status_code,
        op=row,
        spec=views.readable_spec(row.draft),
        views=views,
        state=views.state_label(row.latest_version, row.draft_changed),
        state_kind=views.state_kind(row.latest_version, row.draft_changed),
        findings=findings,
        blocking=[f for f in findings if f.severity == "error"],
        versions=versions,
        diff=diff,
        diff_errors=diff_errors,
        etag=etag(row.id, row.revision),
        base_path=operation_path(ws, name),
        notice=notice,
        refusal=refusal,
        refused_findings=[f for f in refusal.findings if f.severity == "error"]
        if isinstance(refusal, LintFailed)
        else [],
        diff_target=DIFF_TARGET,
    )


@get("/w/{workspace:str}/operations/{name:str}", access=Role.VIEWER)
async def operation_detail(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    name: FromPath[str],
    before: FromQuery[str] = "",
    after: FromQuery[str] = "",
    done: FromQuery[str] = "",
    version: FromQuery[str] = "",
) -> Template:
    return await _detail(
        request, ws, conn, name, before=before, after=after, notice=_notice(done, version)
    )


# --- writes ---------------------------------------------------------------------------------


def _done(ws: Workspace, name: str, done: str, version: int) -> Redirect:
    query = urlencode({"done": done, "version": version})
    return Redirect(f"{operation_path(ws, name)}?{query}", status_code=303)


def _stale(request: Request[Any, Any, Any], ws: Workspace, name: str, exc: Conflict) -> Template:
    """Someone else changed the operation since the page was rendered: nothing was
    written; say so and offer the current page, never a retry of the stale write."""
    fragment = is_htmx(request)
    return page(
        request,
        "_conflict.html" if fragment else "operation_conflict.html",
        status_code=409,
        headers=TO_MESSAGES if fragment else None,
        name=name,
        code=exc.code,
        reload_href=operation_path(ws, name),
    )


async def _refused(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    name: str,
    exc: Conflict | LintFailed | ValidationFailed,
) -> Template:
    """A publish (or a rollback, which publishes) that wrote nothing: a stale page gets
    the conflict page, a refused spec the operation's page saying why."""
    if isinstance(exc, Conflict):
        return _stale(request, ws, name, exc)
    return await _detail(request, ws, conn, name, status_code=exc.status_code, refusal=exc)


@post("/w/{workspace:str}/operations/{name:str}/publish", access=Role.EDITOR)
async def publish(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    principal: Caller,
    name: FromPath[str],
    data: WriteBody,
) -> Template | Redirect:
    expected = expected_revision(data.etag)
    try:
        async with conn.transaction():
            result = await service.publish_operation(conn, ws, principal.actor, name, expected)
    except (Conflict, LintFailed, ValidationFailed) as exc:
        return await _refused(request, ws, conn, name, exc)
    return _done(ws, name, "published" if result.changed else "unchanged", result.version)


@post("/w/{workspace:str}/operations/{name:str}/discard", access=Role.EDITOR)
async def discard(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    principal: Caller,
    name: FromPath[str],
    data: WriteBody,
) -> Template | Redirect:
    expected = expected_revision(data.etag)
    try:
        async with conn.transaction():
            result = await service.discard_draft(conn, ws, principal.actor, name, expected)
    except Conflict as exc:
        return _stale(request, ws, name, exc)
    if result.deleted or result.latest_version is None:
        query = urlencode({"deleted": name})
        return Redirect(f"/ui/w/{ws.slug}/operations?{query}", status_code=303)
    return _done(ws, name, "discarded", result.latest_version)


@post(
    "/w/{workspace:str}/operations/{name:str}/versions/{version:int}/rollback",
    access=Role.EDITOR,
)
async def rollback(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    principal: Caller,
    name: FromPath[str],
    version: FromPath[int],
    data: WriteBody,
) -> Template | Redirect:
    expected = expected_revision(data.etag)
    try:
        async with conn.transaction():
            result = await service.rollback_operation(
                conn, ws, principal.actor, name, version, expected
            )
    except (Conflict, LintFailed, ValidationFailed) as exc:
        return await _refused(request, ws, conn, name, exc)
    return _done(ws, name, "rolled-back", result.version)


handlers: list[Any] = [operation_list, operation_detail, publish, discard, rollback]
