"""Who may call each admin route: declared once on the route, checked before
the body is read (docs/architecture.md, "Roles", "Request admission").

Every handler of the admin API names its callers in its decorator with
``access=`` (Litestar keeps extra decorator keywords in the handler's ``opt``):

- a :class:`~control_plane.auth.Role` for a route under
  ``/workspaces/{workspace}``: admission loads the path's workspace and
  refuses a caller below that role; the ``ws`` dependency hands it over;
- ``ANY_CALLER`` for a route outside workspaces that any admin token may call;
- ``INSTANCE_ADMIN`` for a route outside workspaces only instance admins may
  call: admission refuses the others.

:func:`check_declared_access` runs when the app is built and refuses to start
it when a route declares nothing, declares something its path cannot carry,
does not take the caller from its dependency, is not admitted by the app's
admission hook, or accepts a document-sized body from less than an editor,
so a new route cannot forget its check.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable
from enum import Enum
from typing import Any

from litestar.exceptions import ImproperlyConfiguredException
from litestar.handlers import BaseRouteHandler, HTTPRouteHandler
from litestar.routes import BaseRoute, HTTPRoute

from control_plane.auth import Role
from control_plane.request_body import BodyLimit, body_limit, takes_body

ACCESS = "access"  # the handler opt key the decorators' ``access=`` lands in
WORKSPACE_PARAMETER = "workspace"  # the path parameter naming the workspace
WORKSPACE_DEPENDENCY = "ws"  # the dependency that checks a workspace route's role
CALLER_DEPENDENCY = "principal"  # the dependency that authenticates every caller


class Access(Enum):
    """Access of a route outside workspaces (workspace routes declare a Role)."""

    ANY_CALLER = "any admin token"
    INSTANCE_ADMIN = "instance admins only"


ANY_CALLER = Access.ANY_CALLER
INSTANCE_ADMIN = Access.INSTANCE_ADMIN


def declared_access(handler: BaseRouteHandler) -> Role | Access | None:
    """What the handler declared with ``access=``; None when it declared nothing usable."""
    value = handler.opt.get(ACCESS)
    return value if isinstance(value, Role | Access) else None


def dependency_names(handler: BaseRouteHandler) -> set[str]:
    """Every dependency the handler resolves, directly or through other dependencies."""
    providers = handler.resolve_dependencies()
    pending = [name for name in handler.parsed_fn_signature.parameters if name in providers]
    seen: set[str] = set()
    while pending:
        name = pending.pop()
        if name in seen:
            continue
        seen.add(name)
        wanted = inspect.signature(providers[name].dependency).parameters
        pending.extend(param for param in wanted if param in providers)
    return seen


def access_problem(
    route: HTTPRoute, handler: BaseRouteHandler, admission: Callable[..., Any]
) -> str | None:
    """Why the handler's access declaration cannot hold, or None when it does."""
    access = declared_access(handler)
    in_workspace = WORKSPACE_PARAMETER in route.path_parameters
    if access is None:
        return "declares no access= (a Role, ANY_CALLER or INSTANCE_ADMIN)"
    if in_workspace != isinstance(access, Role):
        return (
            "is under a workspace but does not declare a Role"
            if in_workspace
            else f"declares the {access.name.lower()} role but its path names no workspace"
        )
    needed = WORKSPACE_DEPENDENCY if in_workspace else CALLER_DEPENDENCY
    if needed not in dependency_names(handler):
        return f"does not depend on {needed!r}, which hands it the admitted caller"
    if (
        not isinstance(handler, HTTPRouteHandler)
        or handler.resolve_before_request() is not admission
    ):
        return "does not run the admission hook before its body (before_request)"
    documents = takes_body(handler) and body_limit(handler) is BodyLimit.DOCUMENT
    if documents and not (isinstance(access, Role) and access >= Role.EDITOR):
        return "accepts a document-sized body from less than an editor"
    return None


def check_declared_access(
    routes: Iterable[BaseRoute],
    under: str,
    public: tuple[str, ...],
    admission: Callable[..., Any],
) -> None:
    """Refuse to start when a route below ``under`` (but not below one of ``public``)
    has no access declaration that ``admission`` (the app's ``before_request`` hook)
    enforces; Litestar's automatic OPTIONS answers are left alone."""
    problems = [
        f"{sorted(handler.http_methods)} {route.path} {problem}"
        for route in routes
        if isinstance(route, HTTPRoute)
        and (route.path == under or route.path.startswith(f"{under}/"))
        and not any(route.path == path or route.path.startswith(f"{path}/") for path in public)
        for handler in route.route_handlers
        if handler.http_methods != {"OPTIONS"}
        and (problem := access_problem(route, handler, admission)) is not None
    ]
    if problems:
        raise ImproperlyConfiguredException(
            "admin routes without enforced access: " + "; ".join(problems)
        )
