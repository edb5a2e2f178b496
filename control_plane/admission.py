"""Who calls an admin route, and may they: settled before a byte of the body is
read (docs/architecture.md, "Request admission").

Litestar reads and decodes a handler's ``data`` before it resolves the
handler's dependencies, so access checked in a dependency would come after
the body of a caller without a valid token had been read and decoded.
``admit`` is the app's ``before_request`` hook instead, and runs in order:

1. the token (401): its shape first, then, unless the client is past its
   limit of failed tokens (429, ``control_plane.auth``), one look-up on a
   connection of its own, given back before the body is read, so a slow
   upload holds no database connection;
2. a NUL in the path or the query (400), before the path reaches a query;
3. the access the route declares: an instance admin (403), or a role in the
   path's workspace (404 when the caller has none, 403 when it is too low);
4. the body, only for a handler that takes one (``control_plane.request_body``:
   413 over the route's limit, 400 for JSON too deep, too large or with a NUL).

The caller and the workspace stay in the request's scope for the ``principal``
and ``ws`` dependencies (control_plane.deps). Routes that declare no access
(health, readiness, the OpenAPI document) only get step 2; an admin route
cannot be one of them (``control_plane.access.check_declared_access``).

Web console routes (``control_plane.console``) are admitted the same way, by
the same role declarations, with the session cookie in place of the bearer
token; their writes must also pass the console's request checks (same
origin, the session's CSRF token) before the handler runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, cast

import structlog
from litestar import Request
from litestar.exceptions import ImproperlyConfiguredException

from control_plane.access import INSTANCE_ADMIN, WORKSPACE_PARAMETER, declared_access
from control_plane.auth import (
    Principal,
    Role,
    Workspace,
    authenticate,
    authenticate_session,
    bearer_token,
    check_token_attempts,
    client_address,
    load_workspace,
    require_instance_admin,
)
from control_plane.console.guard import check_console_write, is_console, session_hash
from control_plane.errors import ValidationFailed
from control_plane.request_body import load_body, takes_body
from control_plane.request_checks import nul_in_path, nul_in_query
from control_plane.state import AppState

_SCOPE_KEY = "crank.admitted"
log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Admitted:
    """What admission settled: the caller, and the path's workspace on a workspace route."""

    principal: Principal
    workspace: Workspace | None
    csrf: str | None = None  # the console session's CSRF token; None for a bearer token


def _check_path_and_query(request: Request[Any, Any, Any]) -> None:
    problem = nul_in_path(request) or nul_in_query(request)
    if problem is not None:
        raise ValidationFailed([problem])


async def admit(request: Request[Any, Any, Any]) -> None:
    """The control plane's ``before_request`` hook; raises the first refusal."""
    handler = request.route_handler
    access = declared_access(handler)
    app_state = request.app.state["crank"]
    assert isinstance(app_state, AppState)
    console = is_console(handler)
    csrf = None
    if access is None:
        _check_path_and_query(request)
    else:
        # The credential's shape is checked before a connection is taken.
        cookie_hash = session_hash(request) if console else None
        token = None if console else bearer_token(request)
        client = client_address(request)
        if token is not None:
            check_token_attempts(app_state, client)
        async with app_state.pool.connection() as conn:
            if cookie_hash is not None:
                principal, csrf = await authenticate_session(conn, app_state, cookie_hash)
            else:
                assert token is not None
                principal = await authenticate(conn, app_state, token, client)
            _check_path_and_query(request)
            workspace = None
            if access is INSTANCE_ADMIN:
                require_instance_admin(principal)
            elif isinstance(access, Role):
                slug = request.path_params[WORKSPACE_PARAMETER]
                workspace = await load_workspace(conn, principal, slug, access)
        cast("dict[str, Any]", request.scope)[_SCOPE_KEY] = Admitted(principal, workspace, csrf)
        # The path names resources, never values; the caller by its audit name
        # (docs/security.md, "What logs never hold").
        log.debug(
            "admin_request", method=request.method, path=request.url.path, actor=principal.actor
        )
    if console:
        await check_console_write(request, app_state.settings, csrf)
    elif takes_body(handler):
        await load_body(request, app_state.settings)


def admitted(request: Request[Any, Any, Any]) -> Admitted:
    """What ``admit`` settled for this request; a route it did not admit is a bug."""
    found = cast("dict[str, Any]", request.scope).get(_SCOPE_KEY)
    if not isinstance(found, Admitted):
        raise ImproperlyConfiguredException(f"{request.url.path} was not admitted")
    return found
