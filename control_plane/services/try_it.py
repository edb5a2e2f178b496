"""Try-it: run an operation's *draft* once against its upstream, so an admin can
tune it (``response.select`` above all) before publishing.

The gateway's own pipeline and guards, the same code (docs/architecture.md,
"The upstream call step")::

    arguments ──validate──▶ ──build(secret)──▶ BuiltRequest ──call──▶ result | tool error
              (shared.engine.compiler)                 (CompiledOperation.call: shared.engine.outbound's
                                                 SSRF guard, timeout, safe-only retries, raw
                                                 body limit; then shared.engine.response_selector)

What differs from a tools/call, on purpose (it is an admin tool):

- The confirmation and approval gates do not apply, and the idempotency memory
  is not used: every try-it reaches the upstream. A DELETE try-it is a real
  DELETE. So a try-it of anything but GET needs ``acknowledge_side_effects``
  (else 400 and no call).
- Every try-it, GET included, writes an ``operation.try`` audit row (who,
  operation, method, host, outcome; never argument values, a URL or a body):
  a GET can read what an internal host holds (docs/architecture.md, "Egress
  per workspace"). The row is written *before* the call, committed, so that no
  call goes unrecorded even if the process dies mid-call, and completed with
  the outcome afterwards. The call is sent under the workspace's egress policy.
- The answer shows what a model never sees: the request as sent, the
  upstream's status, headers and raw body (capped at ``MAX_BODY_BYTES``), and
  a tool error's details, and for a refused upstream what an admin changes to
  allow it (``TryResult.remedy``). Secret values — in every spelling shared.engine.masking
  knows (escaped in JSON, percent-encoded, base64), in case the upstream
  echoes them back — are masked everywhere in it, the selected result
  included, before anything is cut; ``Set-Cookie`` headers are left out.
- A failure of the pipeline (invalid arguments, a missing secret, the SSRF
  guard, an upstream error) is a result, ``is_error: true`` with the
  structured tool error, and HTTP 200: the try-it ran. Only a bad request to
  the endpoint itself is an HTTP error.

Transactions: the caller's transaction (the reads, and for a non-GET the audit
row) is committed before the upstream call, so no transaction stays open while
the upstream takes its time; the audit row's completion is committed with the
request.
"""

from __future__ import annotations

import secrets
from typing import Any, Final

import msgspec
import structlog
from psycopg.types.json import Jsonb
from yarl import URL

from control_plane.auth import Role, Workspace
from control_plane.errors import BadRequest, Conflict, ValidationFailed
from control_plane.services.egress_remedy import egress_remedy
from control_plane.services.operations import require_operation
from control_plane.state import AppState
from shared.crypto import SecretBox
from shared.db import Connection
from shared.engine.compiler import CompiledOperation, compile_operation
from shared.engine.egress import EgressPolicy
from shared.engine.errors import ErrorCode, ToolError
from shared.engine.masking import NO_SECRETS, Masker
from shared.engine.request_builder import BuiltRequest
from shared.engine.spec import OperationSpec, operation_from_builtins
from shared.engine.spec_validation import FieldError, validate_operation
from shared.engine.upstream import UpstreamCall, UpstreamFailure
from shared.secrets import load_secrets
from shared.workspace_egress import load_egress

log = structlog.get_logger(__name__)

MAX_BODY_BYTES: Final = 64 * 1024  # of the raw upstream body shown back
AUDIT_ACTION: Final = "operation.try"
_HIDDEN_HEADERS: Final = frozenset({"set-cookie", "set-cookie2"})


class TryRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A try-it's body; anything but GET is a real call and needs ``acknowledge_side_effects``."""

    arguments: dict[str, Any] = msgspec.field(default_factory=dict)
    # Required for anything but GET: the call is real (a DELETE deletes).
    acknowledge_side_effects: bool = False
    # Replaces the draft's response.select for this try only ("@" shows the whole answer).
    select: str | None = None


class RequestView(msgspec.Struct, kw_only=True):
    method: str
    url: str
    headers: list[tuple[str, str]]
    body: str | None
    content_type: str | None


class UpstreamView(msgspec.Struct, kw_only=True):
    status: int | None  # None: no HTTP answer; error_code says why
    error_code: str | None = None
    url: str | None = None  # the final URL, after redirects
    headers: list[tuple[str, str]] = msgspec.field(default_factory=list)
    body: str | None = None  # the raw body as text, masked, at most MAX_BODY_BYTES
    body_bytes: int = 0  # the raw body's whole size
    body_truncated: bool = False
    elapsed_ms: float = 0.0
    attempts: int = 0


class TryResult(msgspec.Struct, kw_only=True):
    is_error: bool
    # The selected result (unwrapped: a 2025-era client gets an array as {"items": [...]}),
    # or the structured tool error a model would get.
    structured_content: Any
    truncated: bool = False  # arrays were trimmed to max_items / max_bytes
    details: dict[str, Any] = msgspec.field(default_factory=dict)  # a tool error's, for admins
    # For a refused upstream: what an admin changes to allow it (which page, setting
    # and entry; control_plane.services.egress_remedy). The model's text stays generic.
    remedy: str | None = None


class TryReport(msgspec.Struct, kw_only=True):
    """The answer of a try-it: the request as sent and the upstream's answer, secrets masked."""

    operation: str
    revision: int  # of the draft that ran
    select: str | None  # the selection used
    request: RequestView | None  # None: the pipeline stopped before a request was built
    upstream: UpstreamView | None  # None: the upstream was not called
    result: TryResult
    audited: bool = False  # an operation.try audit row records this try (always, once run)


def _draft(draft: dict[str, Any], select: str | None) -> OperationSpec:
    """The draft to run, with the ``select`` override; 400 if the override is not valid."""
    try:
        spec = operation_from_builtins(draft)
    except msgspec.ValidationError as exc:
        raise Conflict(
            f"the stored draft no longer fits the file format ({exc}); save it again",
            code="stored_spec_invalid",
        ) from None
    if select is not None:
        response = msgspec.structs.replace(spec.response, select=select)
        spec = msgspec.structs.replace(spec, response=response)
    errors = validate_operation(spec)
    if errors:
        overridden = select is not None
        raise ValidationFailed(
            [
                FieldError("select", e.message)
                if overridden and e.field == "response.select"
                else e
                for e in errors
            ]
        )
    return spec


async def _secrets(
    conn: Connection, box: SecretBox, ws: Workspace, spec: OperationSpec
) -> dict[str, str]:
    """The secrets the operation's auth names, opened; empty if it has none or one
    cannot be opened (the builder then answers ``secret_missing``, naming it)."""
    names = spec.request.secret_names()
    if not names:
        return {}
    return await load_secrets(conn, box, ws.id, names=names)


def _tool_error(exc: ToolError, request_id: str, masker: Masker) -> TryResult:
    return TryResult(
        is_error=True,
        structured_content=masker.value(exc.to_structured(request_id)),
        details=masker.value(exc.details),
    )


def _upstream_view(upstream: UpstreamCall, masker: Masker, code: ErrorCode | None) -> UpstreamView:
    """What the upstream answered, masked; ``code`` says why when it did not answer."""
    response = upstream.response
    if response is None:
        elapsed_ms = round(upstream.elapsed_ms or 0.0, 1)
        return UpstreamView(
            status=None, error_code=code, elapsed_ms=elapsed_ms, attempts=upstream.attempts
        )
    text, cut = masker.excerpt(response.body, MAX_BODY_BYTES, mark="")  # body_truncated says it
    shown = text.encode()[:MAX_BODY_BYTES].decode("utf-8", errors="ignore")
    return UpstreamView(
        status=response.status,
        url=masker.text(response.url),
        headers=[
            (name, masker.text(value))
            for name, value in response.headers
            if name.lower() not in _HIDDEN_HEADERS
        ],
        body=shown,
        body_bytes=len(response.body),
        body_truncated=cut or len(shown) < len(text),
        elapsed_ms=round(response.elapsed_ms, 1),
        attempts=response.attempts,
    )


async def _call(
    state: AppState,
    ws: Workspace,
    compiled: CompiledOperation,
    built: BuiltRequest,
    request_id: str,
    egress: EgressPolicy,
) -> tuple[UpstreamView, TryResult]:
    masker = built.masker
    upstream = UpstreamCall()
    try:
        selected = await compiled.call(state.executor, built, upstream, egress=egress)
    except ToolError as exc:
        view = _upstream_view(upstream, masker, exc.error_code)
        result = _tool_error(exc, request_id, masker)
        if isinstance(exc, UpstreamFailure):
            result.remedy = egress_remedy(
                exc.blocked,
                ws.slug,
                state.settings.language,
                instance_admin=ws.role is Role.INSTANCE_ADMIN,
            )
        return view, result
    # The selection masks what it selects (shared.engine.response_selector).
    result = TryResult(
        is_error=False, structured_content=selected.value, truncated=selected.truncated
    )
    return _upstream_view(upstream, masker, None), result


async def _audit_start(
    conn: Connection, ws: Workspace, actor: str, name: str, revision: int, spec: OperationSpec
) -> int:
    """The row of a try; its host is the operation's (path and query hold argument values)."""
    url = URL(spec.request.url)
    details = {
        "method": spec.request.method,
        "host": url.host,
        "port": url.port,
        "revision": revision,
        "status": None,
    }
    cur = await conn.execute(
        """INSERT INTO audit_log (workspace_id, actor, action, resource_type, resource_name, details)
           VALUES (%s, %s, %s, 'operation', %s, %s) RETURNING id""",
        (ws.id, actor, AUDIT_ACTION, name, Jsonb(details)),
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row["id"])


def _outcome(result: TryResult) -> str:
    """``ok`` or the error code, as the call log names outcomes."""
    return str(result.structured_content["error_code"]) if result.is_error else "ok"


async def _audit_finish(
    conn: Connection, audit_id: int, upstream: UpstreamView | None, result: TryResult
) -> None:
    """The outcome; ``upstream`` None: the pipeline stopped before a request was built."""
    details = {
        "status": None if upstream is None else upstream.status,
        "outcome": _outcome(result),
        "attempts": 0 if upstream is None else upstream.attempts,
    }
    await conn.execute(
        "UPDATE audit_log SET details = details || %s WHERE id = %s", (Jsonb(details), audit_id)
    )


async def try_operation(
    conn: Connection, state: AppState, ws: Workspace, actor: str, name: str, body: TryRequest
) -> TryReport:
    """Run the draft of ``name`` with ``body.arguments``; see the module docstring.

    Commits ``conn``'s transaction before the upstream call."""
    row = await require_operation(conn, ws, name)
    spec = _draft(row.draft, body.select)
    method = spec.request.method
    if method != "GET" and not body.acknowledge_side_effects:
        raise BadRequest(
            f"a try-it of a {method} operation makes a real {method} call upstream; "
            "send acknowledge_side_effects: true to make it",
            code="acknowledgement_required",
            errors=[FieldError("acknowledge_side_effects", f"must be true for a {method}")],
        )
    request_id = "try_" + secrets.token_hex(8)
    audit_id = await _audit_start(conn, ws, actor, name, row.revision, spec)
    report = TryReport(
        operation=name,
        revision=row.revision,
        select=spec.response.select,
        request=None,
        upstream=None,
        result=TryResult(is_error=False, structured_content=None),
        audited=True,
    )
    compiled = compile_operation(spec, language=state.settings.language)
    try:
        cleaned = compiled.validate(body.arguments)
        built = compiled.build(cleaned, await _secrets(conn, state.box, ws, spec))
    except ToolError as exc:
        report.result = _tool_error(exc, request_id, NO_SECRETS)
        await _audit_finish(conn, audit_id, None, report.result)
        return report
    report.request = msgspec.convert(built.redacted(), RequestView)
    egress = await load_egress(conn, ws.id)
    await conn.commit()
    report.upstream, report.result = await _call(state, ws, compiled, built, request_id, egress)
    await _audit_finish(conn, audit_id, report.upstream, report.result)
    log.info(
        "operation_tried",
        workspace=ws.slug,
        operation=name,
        method=method,
        status=report.upstream.status,
        outcome=_outcome(report.result),
        request_id=request_id,
    )
    return report
