"""Errors of the admin API, one root, mapped to JSON at the boundary.

Every error body has the same shape::

    {"code": "validation_failed", "message": "...", "errors": [{"field": ..., "message": ...}]}

``lint_failed`` adds ``findings``: every linter finding, warnings included.

ApiError
 ├── BadRequest            400 bad_request
 ├── ValidationFailed      400 validation_failed (field errors)
 ├── LintFailed            422 lint_failed (field errors + findings)
 ├── Unauthorized          401 unauthorized
 ├── Forbidden             403 forbidden
 ├── NotFound              404 not_found
 ├── Conflict              409 conflict / stale_revision / already_exists
 ├── BodyTooLarge          413 body_too_large (names the limit and its setting)
 └── PreconditionRequired  428 if_match_required
"""

from __future__ import annotations

import contextlib
from typing import Any

import msgspec
import structlog
from litestar import MediaType, Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.status_codes import HTTP_500_INTERNAL_SERVER_ERROR

from control_plane.lint import Finding
from shared.engine.spec_validation import FieldError
from shared.engine.unknown_fields import with_suggestion
from shared.http_errors import http_error_name

log = structlog.get_logger(__name__)


class ErrorBody(msgspec.Struct, kw_only=True, omit_defaults=True):
    code: str
    message: str
    errors: list[FieldError] = msgspec.field(default_factory=list)
    findings: list[Finding] = msgspec.field(default_factory=list)


class ApiError(Exception):
    """The admin API's errors: ``status_code`` and a ``{code, message, errors}`` body."""

    status_code = 400
    code = "bad_request"

    def __init__(
        self, message: str, *, code: str | None = None, errors: list[FieldError] | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.errors = errors or []


class BadRequest(ApiError):
    pass


class ValidationFailed(ApiError):
    """400 with every field error; the message sums up the first five."""

    code = "validation_failed"

    def __init__(self, errors: list[FieldError], message: str = "") -> None:
        summary = message or "; ".join(
            f"{e.field}: {e.message}" if e.field else e.message for e in errors[:5]
        )
        super().__init__(summary or "validation failed", errors=errors)


class LintFailed(ApiError):
    """The linter found errors, so nothing was published; ``findings`` holds them all."""

    status_code = 422
    code = "lint_failed"

    def __init__(
        self,
        errors: list[FieldError],
        findings: list[Finding],
        subject: str,
        *,
        outcome: str = "nothing was published",
    ) -> None:
        count = sum(f.severity == "error" for f in findings)
        rules = ", ".join(sorted({f.rule for f in findings if f.severity == "error"}))
        plural = "s" if count != 1 else ""
        super().__init__(
            f"{subject}: {count} lint error{plural} ({rules}); {outcome}", errors=errors
        )
        self.findings = findings


class Unauthorized(ApiError):
    status_code = 401
    code = "unauthorized"


class TooManyAttempts(ApiError):
    """Too many failed admin tokens from one client address (control_plane.auth)."""

    status_code = 429
    code = "too_many_attempts"

    def __init__(self, retry_after_s: int) -> None:
        super().__init__(
            f"too many failed admin-token attempts from your address: try again in {retry_after_s} s"
        )
        self.retry_after_s = retry_after_s


class Forbidden(ApiError):
    status_code = 403
    code = "forbidden"


class NotFound(ApiError):
    status_code = 404
    code = "not_found"


class Conflict(ApiError):
    """409; ``code`` says which: conflict, stale_revision or already_exists."""

    status_code = 409
    code = "conflict"
    codes = ("stale_revision", "already_exists", "stored_spec_invalid")  # for the API document


class BodyTooLarge(ApiError):
    """413: the body is over the route's limit; says which setting raises it."""

    status_code = 413
    code = "body_too_large"

    def __init__(self, limit: int, setting: str) -> None:
        super().__init__(
            f"the request body is larger than this route's limit of {_size(limit)}; "
            f"{setting} on the control plane raises it"
        )
        self.limit = limit


def _size(count: int) -> str:
    """``1048576 bytes (1 MiB)``: exact, and readable when it is a round number."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale and count % scale == 0:
            return f"{count} bytes ({count // scale} {unit})"
    return f"{count} bytes"


class PreconditionRequired(ApiError):
    status_code = 428
    code = "if_match_required"


def _body(code: str, message: str, errors: list[FieldError] | None = None) -> ErrorBody:
    return ErrorBody(code=code, message=message, errors=errors or [])


def api_error_handler(_request: Request[Any, Any, Any], exc: ApiError) -> Response[ErrorBody]:
    headers = {"WWW-Authenticate": "Bearer"} if exc.status_code == 401 else None
    if isinstance(exc, TooManyAttempts):
        headers = {"Retry-After": str(exc.retry_after_s)}
    body = _body(exc.code, exc.message, exc.errors)
    if isinstance(exc, LintFailed):
        body.findings = exc.findings
    return Response(
        body,
        status_code=exc.status_code,
        headers=headers,
        media_type=MediaType.JSON,
    )


def validation_exception_handler(
    request: Request[Any, Any, Any], exc: ValidationException
) -> Response[ErrorBody]:
    """Litestar's body/parameter validation, in our error shape with field paths; an
    unknown body field gets a "did you mean" from the body's type."""
    data_field = getattr(request.route_handler, "parsed_data_field", None)
    body_type = getattr(data_field, "annotation", None)
    errors: list[FieldError] = []
    for item in exc.extra if isinstance(exc.extra, list) else []:
        if isinstance(item, dict):
            key = str(item.get("key") or "")
            message = str(item.get("message") or "")
            # msgspec reports "... - at `$.request.method`": keep the path as the field.
            if " - at `$" in message:
                message, _, where = message.rpartition(" - at `$")
                key = where.rstrip("`").lstrip(".") or key
            elif key == "data":
                key = ""  # the body as a whole, e.g. an unknown top-level field
                if message == "'data'":  # Litestar's KeyError text: there was no body at all
                    message = "this request needs a JSON body; none was sent"
            if body_type is not None:
                with contextlib.suppress(TypeError, ValueError):  # a type msgspec cannot inspect
                    message = with_suggestion(message, key, body_type)
            errors.append(FieldError(key, message))
    return Response(
        _body("validation_failed", exc.detail, errors), status_code=400, media_type=MediaType.JSON
    )


def http_exception_handler(
    _request: Request[Any, Any, Any], exc: HTTPException
) -> Response[ErrorBody]:
    code = http_error_name(exc.status_code)
    return Response(
        _body(code, exc.detail),
        status_code=exc.status_code,
        headers=exc.headers,
        media_type=MediaType.JSON,
    )


def internal_error_handler(request: Request[Any, Any, Any], _exc: Exception) -> Response[ErrorBody]:
    log.exception("unhandled_error", path=request.url.path, method=request.method)
    return Response(
        _body("internal_error", "internal error; see the server log"),
        status_code=HTTP_500_INTERNAL_SERVER_ERROR,
        media_type=MediaType.JSON,
    )


exception_handlers: dict[Any, Any] = {
    ApiError: api_error_handler,
    ValidationException: validation_exception_handler,
    HTTPException: http_exception_handler,
    Exception: internal_error_handler,
}
