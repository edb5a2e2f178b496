"""Try-it: run an operation's *draft* once against its upstream, so an admin can
tune it (``response.select`` above all) before publishing.

The gateway's own pipeline and guards, the same code (DESIGN "Where code lives")::

    arguments ──validate──▶ ──build(secret)──▶ BuiltRequest ──execute──▶ upstream answer
              (shared.compiler)                  (shared.outbound: SSRF guard, timeout,
                                                  safe-only retries, raw body limit)
        ──select──▶ result (shared.response_selector)

What differs from a tools/call, on purpose (it is an admin tool):

- The confirmation and approval gates do not apply, and the idempotency memory
  is not used: every try-it reaches the upstream. A DELETE try-it is a real
  DELETE. So a try-it of anything but GET needs ``acknowledge_side_effects``
  (else 400 and no call), and writes an ``operation.try`` audit row *before*
  the call, committed, so that no side effect goes unrecorded even if the
  process dies mid-call; the row is completed with the outcome afterwards.
- The answer shows what a model never sees: the request as sent, the
  upstream's status, headers and raw body (capped at ``MAX_BODY_BYTES``), and
  a tool error's details. Secret values — and the JSON- and URL-escaped forms
  of them, in case the upstream echoes them back — are masked everywhere in
  it, the selected result included; ``Set-Cookie`` headers are left out.
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
import time
from collections.abc import Iterable
from typing import Any, Final, cast
from urllib.parse import quote

import msgspec
import structlog
from psycopg.types.json import Jsonb

from control_plane.auth import Workspace
from control_plane.errors import BadRequest, Conflict, ValidationFailed
from control_plane.services.operations import require_operation
from control_plane.state import AppState
from shared.compiler import CompiledOperation, compile_operation
from shared.crypto import CryptoError, Sealed, SecretBox, secret_associated_data
from shared.db import Connection
from shared.errors import ErrorCode, Language, ToolError, mask
from shared.outbound import OutboundError, UpstreamResponse
from shared.request_builder import BuiltRequest
from shared.spec import OperationSpec, operation_from_builtins
from shared.spec_validation import FieldError, validate_operation

log = structlog.get_logger(__name__)

MAX_BODY_BYTES: Final = 64 * 1024  # of the raw upstream body shown back
AUDIT_ACTION: Final = "operation.try"
_HIDDEN_HEADERS: Final = frozenset({"set-cookie", "set-cookie2"})
_json = msgspec.json.Encoder()


class TryRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
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


class TryReport(msgspec.Struct, kw_only=True):
    operation: str
    revision: int  # of the draft that ran
    select: str | None  # the selection used
    request: RequestView | None  # None: the pipeline stopped before a request was built
    upstream: UpstreamView | None  # None: the upstream was not called
    result: TryResult
    audited: bool = False  # an operation.try audit row records this call


# Secret values as the upstream may echo them: raw, inside a JSON string, percent-encoded.
def _mask_values(values: Iterable[str]) -> tuple[str, ...]:
    variants: set[str] = set()
    for value in values:
        if value:
            variants |= {value, _json.encode(value).decode()[1:-1], quote(value, safe="")}
    return tuple(variants)


def _mask_deep(value: Any, secret_values: tuple[str, ...]) -> Any:
    """``value`` with every secret masked in every string, keys included."""
    if isinstance(value, str):
        return mask(value, secret_values)
    if isinstance(value, list):
        return [_mask_deep(item, secret_values) for item in value]
    if isinstance(value, dict):
        return {mask(str(k), secret_values): _mask_deep(v, secret_values) for k, v in value.items()}
    return value


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
    """The one secret the operation's auth names, opened; empty if it has none or it
    cannot be opened (the builder then answers ``secret_missing``, naming it)."""
    auth = spec.request.auth
    if auth is None:
        return {}
    cur = await conn.execute(
        "SELECT ciphertext, nonce, key_id FROM secrets WHERE workspace_id = %s AND name = %s",
        (ws.id, auth.secret),
    )
    row = await cur.fetchone()
    if row is None:
        return {}
    sealed = Sealed(bytes(row["ciphertext"]), bytes(row["nonce"]), row["key_id"])
    try:
        return {auth.secret: box.open(sealed, secret_associated_data(ws.id, auth.secret))}
    except CryptoError:
        log.warning("try_it_secret_unreadable", workspace=ws.slug, secret=auth.secret)
        return {}


def _tool_error(exc: ToolError, request_id: str, secret_values: tuple[str, ...]) -> TryResult:
    exc.request_id = request_id
    return TryResult(
        is_error=True,
        structured_content=_mask_deep(exc.to_structured(), secret_values),
        details=_mask_deep(exc.details, secret_values),
    )


def _upstream_view(response: UpstreamResponse, secret_values: tuple[str, ...]) -> UpstreamView:
    text = mask(response.body.decode("utf-8", errors="replace"), secret_values)
    shown = text.encode()[:MAX_BODY_BYTES].decode("utf-8", errors="ignore")
    return UpstreamView(
        status=response.status,
        url=mask(response.url, secret_values),
        headers=[
            (name, mask(value, secret_values))
            for name, value in response.headers
            if name.lower() not in _HIDDEN_HEADERS
        ],
        body=shown,
        body_bytes=len(response.body),
        body_truncated=len(shown) < len(text),
        elapsed_ms=round(response.elapsed_ms, 1),
        attempts=response.attempts,
    )


async def _call(
    state: AppState,
    compiled: CompiledOperation,
    built: BuiltRequest,
    request_id: str,
) -> tuple[UpstreamView, TryResult]:
    secret_values = _mask_values(built.secret_values)
    language: Language = state.settings.language
    started = time.perf_counter()
    try:
        response = await state.executor.execute(compiled.upstream_request(built))
    except OutboundError as exc:
        view = UpstreamView(
            status=None,
            error_code=exc.code,
            elapsed_ms=round((time.perf_counter() - started) * 1000, 1),
            attempts=exc.attempts,
        )
        error = ToolError.of(
            cast(ErrorCode, exc.code), language=language, details={"reason": str(exc)}
        )
        return view, _tool_error(error, request_id, secret_values)
    view = _upstream_view(response, secret_values)
    try:
        selected = compiled.select(
            response.status, response.headers, response.body, secret_values=secret_values
        )
    except ToolError as exc:
        return view, _tool_error(exc, request_id, secret_values)
    result = TryResult(
        is_error=False,
        structured_content=_mask_deep(selected.value, secret_values),
        truncated=selected.truncated,
    )
    return view, result


async def _audit_start(
    conn: Connection, ws: Workspace, actor: str, name: str, revision: int, request: RequestView
) -> int:
    details = {"method": request.method, "url": request.url, "revision": revision, "status": None}
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
    conn: Connection, audit_id: int, upstream: UpstreamView, result: TryResult
) -> None:
    details = {
        "status": upstream.status,
        "outcome": _outcome(result),
        "attempts": upstream.attempts,
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
    report = TryReport(
        operation=name,
        revision=row.revision,
        select=spec.response.select,
        request=None,
        upstream=None,
        result=TryResult(is_error=False, structured_content=None),
    )
    compiled = compile_operation(spec, language=state.settings.language)
    try:
        cleaned = compiled.validate(body.arguments)
        built = compiled.build(cleaned, await _secrets(conn, state.box, ws, spec))
    except ToolError as exc:
        report.result = _tool_error(exc, request_id, ())
        return report
    redacted = _mask_deep(built.redacted(), _mask_values(built.secret_values))
    report.request = msgspec.convert(redacted, RequestView)
    audit_id = None
    if method != "GET":
        audit_id = await _audit_start(conn, ws, actor, name, row.revision, report.request)
        report.audited = True
    await conn.commit()
    report.upstream, report.result = await _call(state, compiled, built, request_id)
    if audit_id is not None:
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
