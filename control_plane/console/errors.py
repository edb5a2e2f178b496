"""Console errors as pages: a request without a session goes to sign-in; any other
refusal is a short page that says what happened (the API's JSON errors would
be unreadable in a browser). An htmx request is redirected with ``HX-Redirect``
and gets refusals as a fragment it swaps into the page's message area."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import structlog
from litestar import Request, Response
from litestar.exceptions import HTTPException, ValidationException
from litestar.response import Redirect, Template

from control_plane.console.rendering import SECURITY_HEADERS, TO_MESSAGES, is_htmx, public_page
from control_plane.errors import ApiError, Unauthorized
from shared.http_errors import http_error_name

log = structlog.get_logger(__name__)

SIGN_IN_PATH = "/ui/sign-in"


def sign_in_redirect(request: Request[Any, Any, Any]) -> Response[Any]:
    target = f"{SIGN_IN_PATH}?next={quote(request.url.path, safe='/')}"
    if is_htmx(request):
        return Response(b"", status_code=204, headers={"HX-Redirect": target})
    return Redirect(target, status_code=303)


def _refusal(request: Request[Any, Any, Any], status: int, code: str, message: str) -> Template:
    template = "_message.html" if is_htmx(request) else "error.html"
    headers = TO_MESSAGES if is_htmx(request) else None
    return public_page(
        template, status_code=status, headers=headers, code=code, message=message, kind="error"
    )


def api_error_page(request: Request[Any, Any, Any], exc: ApiError) -> Response[Any]:
    if isinstance(exc, Unauthorized):
        return sign_in_redirect(request)
    return _refusal(request, exc.status_code, exc.code, exc.message)


def validation_page(request: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    return _refusal(request, 400, "validation_failed", exc.detail)


def http_error_page(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    return _refusal(request, exc.status_code, http_error_name(exc.status_code), exc.detail)


def internal_error_page(request: Request[Any, Any, Any], _exc: Exception) -> Response[Any]:
    log.exception("unhandled_error", path=request.url.path, method=request.method)
    return _refusal(request, 500, "internal_error", "Something went wrong; see the server log.")


exception_handlers: dict[Any, Any] = {
    ApiError: api_error_page,
    ValidationException: validation_page,
    HTTPException: http_error_page,
    Exception: internal_error_page,
}

__all__ = ["SECURITY_HEADERS", "exception_handlers", "sign_in_redirect"]
