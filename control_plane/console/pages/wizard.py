"""The operation wizard: create or edit an operation's draft in five steps.

Request → parameters → response (with a live try-it) → safety → review and
publish. Every step is saved into the draft itself through the operations
service, with the revision the page was rendered from as its If-Match, so a
stale page is refused ("changed by someone else"), never written over
(docs/architecture.md, "The console"). The step forms are plain form posts;
htmx only swaps fragments: the parameter rows and the try-it preview.
"""

from __future__ import annotations

import json
from typing import Any

import msgspec
from litestar import Request, Response, get, post
from litestar.params import FromPath
from litestar.response import Redirect, Template

from control_plane.auth import Role, Workspace
from control_plane.console.forms import ETAG_FIELD, expected_revision
from control_plane.console.pages.operations import operation_path
from control_plane.console.rendering import is_htmx, page
from control_plane.console.wizard import schema as schema_form
from control_plane.console.wizard.schema import ParamRow
from control_plane.console.wizard.steps import (
    METHODS,
    REQUEST_FIELDS,
    RESPONSE_FIELDS,
    SAFETY_FIELDS,
    STEP_TITLES,
    STEPS,
    apply_request,
    apply_response,
    apply_safety,
    form_values,
    parse_arguments,
    place_errors,
    request_values,
    response_values,
    safety_values,
    step_of,
)
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.errors import ApiError, Conflict, LintFailed, NotFound, ValidationFailed
from control_plane.etag import etag
from control_plane.lint import Finding, lint_operation
from control_plane.services.operations import (
    OperationRow,
    create_operation,
    publish_operation,
    require_operation,
    update_operation_draft,
)
from control_plane.services.secrets import list_secrets
from control_plane.services.try_it import TryReport, TryRequest, try_operation
from shared.db import Connection
from shared.engine.spec import OperationSpec, RequestSpec, operation_from_builtins
from shared.engine.spec import spec_to_builtins as to_builtins
from shared.engine.spec_validation import (
    FieldError,
    decode_error_to_field,
    path_variables,
    validate_operation,
)
from shared.engine.tool_definition import tool_definitions

AnyRequest = Request[Any, Any, Any]
_OPERATION = "/w/{workspace:str}/operations/{name:str}"
_TYPE_OPTIONS = [(kind, kind) for kind in schema_form.TYPES]


def _edit_url(ws: Workspace, name: str, step: str = "") -> str:
    tail = f"/{step}" if step else ""
    return f"{operation_path(ws, name)}/edit{tail}"


def _fragment_url(ws: Workspace, name: str) -> str:
    """Where the htmx fragments of ``name``'s wizard are (beside ``edit/{step}``, not under it)."""
    return f"{operation_path(ws, name)}/wizard"


def _blank_draft() -> dict[str, Any]:
    blank = OperationSpec(
        name="",
        description="",
        input={"type": "object", "properties": {}},
        request=RequestSpec(method="GET", url=""),
    )
    return to_builtins(blank)


def _spec(draft: dict[str, Any]) -> OperationSpec:
    try:
        return operation_from_builtins(draft)
    except msgspec.ValidationError as exc:
        raise ValidationFailed([decode_error_to_field(exc)]) from None


def _judged(
    step: str, draft: dict[str, Any], shaped: dict[str, str], rows: list[ParamRow] | None = None
) -> tuple[dict[str, str], list[FieldError]]:
    """Every error of a step at once: the fields whose text is not even shaped right
    (``shaped``) and what the service's validation says of the rest of the draft."""
    try:
        problems = validate_operation(_spec(draft))
    except ValidationFailed as exc:
        problems = exc.errors
    placed, elsewhere = place_errors(step, problems, rows)
    return {**placed, **shaped}, elsewhere


def _check_step(step: str) -> None:
    if step not in STEPS:
        raise NotFound(f"the wizard has no step {step!r}; its steps are {', '.join(STEPS)}")


async def _secret_names(conn: Connection, ws: Workspace) -> list[str]:
    return [secret.name for secret in await list_secrets(conn, ws.id)]


def _url_variables(url: str) -> list[str]:
    try:
        return path_variables(url)
    except ValueError:
        return []


def _pretty(text: str | None) -> str:
    """A raw upstream body, indented when it is JSON."""
    if not text:
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


class StepPage:
    """What one rendering of a step needs; ``render`` fills in the rest from the draft."""

    def __init__(self, request: AnyRequest, ws: Workspace, step: str, draft: dict[str, Any]):
        self.request = request
        self.ws = ws
        self.step = step
        self.draft = draft
        self.context: dict[str, Any] = {
            "errors": {},
            "elsewhere": [],
            "notice": None,
            "conflict": False,
            "preview": None,
            "findings": None,
        }

    def render(self, status_code: int = 200, **context: Any) -> Template:
        name = self.draft["name"]
        context = {**self.context, **context}
        new = not name or context.get("new", False)
        shared = {
            "step": self.step,
            "steps": [(step, STEP_TITLES[step]) for step in STEPS],
            "new": new,
            "op_name": name,
            "edit_url": "" if new else _edit_url(self.ws, name),
            "fragment_url": "" if new else _fragment_url(self.ws, name),
            "action_url": (
                f"/ui/w/{self.ws.slug}/operations/new"
                if new
                else _edit_url(self.ws, name, self.step)
            ),
            "method_options": [(method, method) for method in METHODS],
            "type_options": _TYPE_OPTIONS,
            "path_variables": _url_variables(self.draft["request"]["url"]),
            "method": self.draft["request"]["method"],
            "parameter_names": list((self.draft["input"].get("properties") or {}).keys()),
            "pretty": _pretty,
            "step_of": step_of,
        }
        return page(
            self.request,
            "wizard.html",
            status_code=status_code,
            **{**shared, **context},
        )


def _rows_context(rows: list[ParamRow], extra: dict[str, Any] | str) -> dict[str, Any]:
    text = extra if isinstance(extra, str) else (json.dumps(extra, indent=2) if extra else "")
    return {"rows": rows, "extra_text": text}


async def _step_page(
    request: AnyRequest, conn: Connection, ws: Workspace, row: OperationRow, step: str
) -> StepPage:
    """The step as stored: its fields filled from the draft."""
    view = StepPage(request, ws, step, row.draft)
    view.context["etag"] = etag(row.id, row.revision)
    view.context["revision"] = row.revision
    if step == "request":
        view.context["values"] = request_values(row.draft)
        view.context["secret_names"] = await _secret_names(conn, ws)
    elif step == "parameters":
        rows, extra = schema_form.rows_from_schema(row.draft["input"])
        view.context.update(_rows_context(rows, extra))
    elif step == "response":
        view.context["values"] = response_values(row.draft)
    elif step == "safety":
        view.context["values"] = safety_values(row.draft)
    else:
        spec = _spec(row.draft)
        view.context["findings"] = lint_operation(spec)
        view.context["published"] = row.latest_version
        view.context["draft_changed"] = row.draft_changed
        view.context.update(_summary(spec))
    return view


def _summary(spec: OperationSpec) -> dict[str, Any]:
    """What the review step shows before a publish: the tool exactly as tools/list will
    show it to the model (2026-07-28), and what Crank sends and keeps of the answer."""
    _, tool = tool_definitions(spec)
    return {
        "tool_json": json.dumps(tool, indent=2, ensure_ascii=False),
        "summary_request": spec.request,
        "summary_select": spec.response.select,
    }


# --- a new operation: step 1 creates the draft ---------------------------------------------


@get("/w/{workspace:str}/operations/new", access=Role.EDITOR)
async def new_operation(request: AnyRequest, ws: CurrentWorkspace, conn: DbConn) -> Template:
    draft = _blank_draft()
    view = StepPage(request, ws, "request", draft)
    return view.render(
        values=request_values(draft), secret_names=await _secret_names(conn, ws), new=True
    )


@post("/w/{workspace:str}/operations/new", access=Role.EDITOR)
async def create_from_wizard(
    request: AnyRequest, ws: CurrentWorkspace, conn: DbConn, principal: Caller
) -> Response[Any]:
    form = await request.form()
    values = form_values(form, REQUEST_FIELDS)
    secret_names = await _secret_names(conn, ws)
    draft, errors = apply_request(_blank_draft(), values, secret_names)
    draft["name"] = values["name"].strip()
    draft["input"], _added = schema_form.with_path_variables(
        draft["input"], draft["request"]["url"]
    )
    view = StepPage(request, ws, "request", draft)
    view.context.update(values=values, secret_names=secret_names, new=True)
    if errors:
        placed, elsewhere = _judged("request", draft, errors)
        return view.render(400, errors=placed, elsewhere=elsewhere)
    try:
        await create_operation(conn, ws, principal.actor, _spec(draft))
    except ValidationFailed as exc:
        placed, elsewhere = place_errors("request", exc.errors)
        return view.render(400, errors=placed, elsewhere=elsewhere)
    except Conflict as exc:  # already_exists: the name is taken
        return view.render(409, errors={"name": exc.message})
    return Redirect(_edit_url(ws, draft["name"], "parameters"), status_code=303)


# --- an existing draft, step by step -------------------------------------------------------


@get(f"{_OPERATION}/edit", access=Role.EDITOR)
async def edit_operation(ws: CurrentWorkspace, name: FromPath[str]) -> Redirect:
    return Redirect(_edit_url(ws, name, "request"), status_code=303)


@get(f"{_OPERATION}/edit/{{step:str}}", access=Role.EDITOR)
async def edit_step(
    request: AnyRequest,
    ws: CurrentWorkspace,
    conn: DbConn,
    name: FromPath[str],
    step: FromPath[str],
) -> Template:
    _check_step(step)
    row = await require_operation(conn, ws, name)
    return (await _step_page(request, conn, ws, row, step)).render()


def _next_step(step: str, action: str) -> str:
    index = STEPS.index(step)
    if action == "back":
        return STEPS[max(index - 1, 0)]
    if action == "stay":
        return step
    return STEPS[min(index + 1, len(STEPS) - 1)]


async def _parameters_draft(
    view: StepPage, form: Any
) -> tuple[dict[str, Any], dict[str, str], list[ParamRow]]:
    """The draft with the posted parameters, and the errors of rows not shaped right."""
    rows = schema_form.rows_from_form(form)
    extra_text = str(form.get("extra", ""))
    extra, extra_error = schema_form.parse_extra(extra_text)
    schema = schema_form.schema_from_rows(rows, extra)
    view.context.update(_rows_context(rows, extra_text))
    errors = {
        f"{row.key}.{field}": message for row in rows for field, message in row.errors.items()
    }
    if extra_error:
        errors["extra"] = extra_error
    return {**view.draft, "input": schema}, errors, rows


def _edited_rows(form: Any, action: str) -> list[ParamRow]:
    """The posted rows with one added or one removed (``remove:<key>``)."""
    rows = schema_form.rows_from_form(form)
    if action == "add" and len(rows) < schema_form.MAX_ROWS:
        rows.append(ParamRow(key=schema_form.new_key()))
    elif action.startswith("remove:"):
        rows = [row for row in rows if row.key != action.removeprefix("remove:")]
    return rows


async def _run_try(
    conn: Connection, state: Any, ws: Workspace, actor: str, name: str, values: dict[str, str]
) -> tuple[TryReport | None, dict[str, str]]:
    """The try-it of the stored draft with the page's select and arguments."""
    arguments, problem = parse_arguments(values["arguments"])
    if problem:
        return None, {"arguments": problem}
    body = TryRequest(
        arguments=arguments,
        select=values["select"].strip() or "@",
        acknowledge_side_effects=values["acknowledge"] == "on",
    )
    try:
        return await try_operation(conn, state, ws, actor, name, body), {}
    except ApiError as exc:  # the select does not compile, or a real call was not acknowledged
        placed, elsewhere = place_errors("response", exc.errors)
        if elsewhere or not placed:
            placed.setdefault("select", exc.message)
        return None, placed


@post(f"{_OPERATION}/edit/{{step:str}}", access=Role.EDITOR)
async def save_step(
    request: AnyRequest,
    ws: CurrentWorkspace,
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
    name: FromPath[str],
    step: FromPath[str],
) -> Response[Any]:
    _check_step(step)
    form = await request.form()
    action = str(form.get("action", "next"))
    row = await require_operation(conn, ws, name)
    view = StepPage(request, ws, step, row.draft)
    view.context["etag"] = str(form.get(ETAG_FIELD, ""))
    errors: dict[str, str] = {}
    rows: list[ParamRow] = []
    draft: dict[str, Any]
    if step == "request":
        values = form_values(form, REQUEST_FIELDS)
        values["name"] = name
        view.context.update(values=values, secret_names=await _secret_names(conn, ws))
        draft, errors = apply_request(row.draft, values, view.context["secret_names"])
        draft["input"], _added = schema_form.with_path_variables(
            draft["input"], draft["request"]["url"]
        )
    elif step == "parameters":
        if action == "add" or action.startswith("remove:"):  # without JavaScript
            edited = _edited_rows(form, action)
            view.context.update(_rows_context(edited, str(form.get("extra", ""))))
            return view.render(focus_key=edited[-1].key if action == "add" and edited else "")
        draft, errors, rows = await _parameters_draft(view, form)
    elif step == "response":
        values = form_values(form, RESPONSE_FIELDS)
        view.context["values"] = values
        if action == "try":
            report, errors = await _run_try(conn, app_state, ws, principal.actor, name, values)
            return view.render(200 if report else 400, preview=report, errors=errors)
        draft, errors = apply_response(row.draft, values)
    elif step == "safety":
        values = form_values(form, SAFETY_FIELDS)
        view.context["values"] = values
        draft, errors = apply_safety(row.draft, values)
    else:
        return await _review_action(view, conn, principal.actor, row, action)
    if errors:
        placed, elsewhere = _judged(step, draft, errors, rows)
        return view.render(400, errors=placed, elsewhere=elsewhere)
    try:
        await update_operation_draft(
            conn, ws, principal.actor, name, _spec(draft), expected_revision(view.context["etag"])
        )
    except ValidationFailed as exc:
        placed, elsewhere = place_errors(step, exc.errors, rows)
        return view.render(400, errors=placed, elsewhere=elsewhere)
    except Conflict:  # stale_revision: someone saved this draft since the page was rendered
        return view.render(409, conflict=True)
    return Redirect(_edit_url(ws, name, _next_step(step, action)), status_code=303)


async def _review_action(
    view: StepPage, conn: Connection, actor: str, row: OperationRow, action: str
) -> Response[Any]:
    """Save draft (it is saved already: back to the operation) or publish it."""
    ws = view.ws
    if action != "publish":
        return Redirect(operation_path(ws, row.name), status_code=303)
    spec = _spec(row.draft)
    findings: list[Finding] = lint_operation(spec)
    view.context.update(findings=findings, published=row.latest_version, revision=row.revision)
    view.context.update(_summary(spec))
    view.context["draft_changed"] = row.draft_changed
    try:
        result = await publish_operation(
            conn, ws, actor, row.name, expected_revision(view.context["etag"])
        )
    except LintFailed as exc:
        return view.render(422, findings=exc.findings, blocked=True)
    except ValidationFailed as exc:
        return view.render(400, elsewhere=exc.errors)
    except Conflict:
        return view.render(409, conflict=True)
    return view.render(
        published=result.version,
        draft_changed=False,
        findings=result.findings,
        notice=(
            f"Published version {result.version}."
            if result.changed
            else f"Nothing new to publish: version {result.version} is this draft."
        ),
    )


# --- htmx fragments --------------------------------------------------------------------------


@post(f"{_OPERATION}/wizard/parameter-rows", access=Role.EDITOR)
async def parameter_rows(
    request: AnyRequest, ws: CurrentWorkspace, conn: DbConn, name: FromPath[str]
) -> Template:
    """The parameter rows with one added or removed; nothing is saved."""
    row = await require_operation(conn, ws, name)
    form = await request.form()
    rows = _edited_rows(form, str(form.get("action", "")))
    added = rows[-1].key if rows and form.get("action") == "add" else ""
    return page(
        request,
        "wizard_rows.html",
        rows=rows,
        type_options=_TYPE_OPTIONS,
        errors={},
        edit_url=_edit_url(ws, name),
        fragment_url=_fragment_url(ws, name),
        focus_key=added,
        path_variables=_url_variables(row.draft["request"]["url"]),
    )


@post(f"{_OPERATION}/wizard/try", access=Role.EDITOR)
async def try_preview(
    request: AnyRequest,
    ws: CurrentWorkspace,
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
    name: FromPath[str],
) -> Template:
    """The try-it preview: the raw answer and the selected result (select errors out of band)."""
    await require_operation(conn, ws, name)
    values = form_values(await request.form(), RESPONSE_FIELDS)
    report, errors = await _run_try(conn, app_state, ws, principal.actor, name, values)
    return page(
        request,
        "wizard_preview.html",
        preview=report,
        errors=errors,
        oob=is_htmx(request),
        pretty=_pretty,
    )


handlers: list[Any] = [
    new_operation,
    create_from_wizard,
    edit_operation,
    edit_step,
    save_step,
    parameter_rows,
    try_preview,
]
