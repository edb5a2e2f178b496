"""What admission checks on a console request (docs/architecture.md, "The console").

Console routes carry ``console=True`` in their ``opt`` (the console router
sets it). They are admitted by the same ``access=`` roles as the API, with
the session cookie as the credential. A write (any method but GET and HEAD)
must also come from the console's own origin (``Origin`` and
``Sec-Fetch-Site``), carry a form body of at most ``CRANK_MAX_BODY_BYTES``,
and, once signed in, the session's CSRF token: the ``X-CSRF-Token`` header
htmx sends, or the form field ``_csrf`` of a plain form post.
"""

from __future__ import annotations

import hmac
from typing import Any

from litestar import Request
from litestar.handlers import BaseRouteHandler
from litestar.utils.scope.state import ScopeState

from control_plane.console.sessions import value_hash
from control_plane.errors import BadRequest, Forbidden, Unauthorized
from control_plane.request_body import BodyLimit, read_body
from shared.settings import Settings

CONSOLE = "console"  # the handler opt key that marks a console route
COOKIE = "crank_console"
CSRF_HEADER = "x-csrf-token"
CSRF_FIELD = "_csrf"
_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
_FORM = "application/x-www-form-urlencoded"


def is_console(handler: BaseRouteHandler) -> bool:
    return handler.opt.get(CONSOLE) is True


def session_hash(request: Request[Any, Any, Any]) -> bytes:
    """The stored form of the request's session cookie; Unauthorized when it has none."""
    cookie = request.cookies.get(COOKIE, "")
    if not cookie or len(cookie) > 100:
        raise Unauthorized("sign in to the console")
    return value_hash(cookie)


def cookie_is_secure(request: Request[Any, Any, Any], settings: Settings) -> bool:
    if settings.console_cookie_secure == "auto":
        return request.url.scheme == "https"
    return settings.console_cookie_secure == "always"


def _same_origin(request: Request[Any, Any, Any]) -> bool:
    if request.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:  # older browsers send none on same-origin posts; the token decides
        return True
    host = request.headers.get("host", "")
    return origin in (f"http://{host}", f"https://{host}")


async def check_console_write(
    request: Request[Any, Any, Any], settings: Settings, csrf: str | None
) -> None:
    """Refuse a cross-site or tokenless console write, reading its (bounded) form body."""
    if request.method in _SAFE_METHODS:
        return
    if not _same_origin(request):
        raise Forbidden("a console form may only be sent from the console itself")
    content_type = request.headers.get("content-type", _FORM).split(";")[0].strip().lower()
    if content_type != _FORM:
        raise BadRequest(f"a console form is sent as {_FORM}")
    limit = BodyLimit.ORDINARY
    ScopeState.from_scope(request.scope).body = await read_body(
        request, limit.bytes(settings), limit.setting
    )
    if csrf is None:  # signing in: there is no session yet
        return
    sent = request.headers.get(CSRF_HEADER) or (await request.form()).get(CSRF_FIELD) or ""
    if not isinstance(sent, str) or not hmac.compare_digest(sent.encode(), csrf.encode()):
        raise Forbidden("this page is out of date: reload it and try again")
