"""Litestar dependencies every route uses: the process state, a connection, the
caller, the path's workspace at the role the route declares, and ``If-Match``.

The caller and the workspace were settled by ``control_plane.admission.admit``
before the body was read (docs/architecture.md, "Request admission"); their
dependencies hand them to the handler. ``If-Match`` comes after them, which
gives the status precedence: 401 (no valid token) → 404 (no such workspace,
or no role in it) → 403 (a role below the route's) → 428 (a write without
``If-Match``).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Annotated, Any

from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide
from litestar.exceptions import ImproperlyConfiguredException
from litestar.params import HeaderParameter

from control_plane.access import CALLER_DEPENDENCY, WORKSPACE_DEPENDENCY
from control_plane.admission import admitted
from control_plane.auth import Principal, Workspace
from control_plane.etag import Precondition, parse_if_match
from control_plane.state import AppState
from shared.db import Connection

# Handlers annotate injected parameters with these (Litestar 3 drops inferred injection).
DbConn = NamedDependency[Connection]
Caller = NamedDependency[Principal]
CrankState = NamedDependency[AppState]
CurrentWorkspace = NamedDependency[Workspace]
IfMatch = NamedDependency[Precondition]

AnyRequest = Request[Any, Any, Any]
IfMatchHeader = Annotated[
    str | None,
    HeaderParameter(
        name="If-Match",
        required=False,
        description="The ETag of the resource as read; without it this write answers 428.",
    ),
]


def provide_state(state: State) -> AppState:
    app_state = state["crank"]
    assert isinstance(app_state, AppState)
    return app_state


async def provide_conn(app_state: CrankState) -> AsyncGenerator[Connection, None]:
    """One connection and one transaction per request: committed when the handler
    returns, rolled back when it raises, so a failed write changes nothing."""
    async with app_state.pool.connection() as conn:
        yield conn


def provide_principal(request: AnyRequest) -> Principal:
    """The caller admission authenticated (an instance admin on an ``INSTANCE_ADMIN`` route)."""
    return admitted(request).principal


def provide_workspace(request: AnyRequest) -> Workspace:
    """The path's workspace, which admission found the caller holds the route's role in."""
    workspace = admitted(request).workspace
    if workspace is None:  # check_declared_access refuses such an app at start
        raise ImproperlyConfiguredException(f"{request.url.path} declares no workspace role")
    return workspace


def provide_if_match(
    ws: CurrentWorkspace, conn: DbConn, if_match_header: IfMatchHeader = None
) -> Precondition:
    """What the write is based on. Takes ``ws`` so access is checked (404, 403) before 428.

    Takes ``conn`` (unused) so it is resolved after the connection: Litestar
    resolves the dependencies of one level concurrently and cancels the others
    when one raises, and a ``conn`` cancelled while it was taking its
    connection never gave it back; a burst of 428s emptied the pool (found by
    the fuzzer, docs/architecture.md, "The API document")."""
    del ws, conn
    return parse_if_match(if_match_header)


dependencies = {
    "app_state": Provide(provide_state, sync_to_thread=False),
    "conn": Provide(provide_conn),
    CALLER_DEPENDENCY: Provide(provide_principal, sync_to_thread=False),
    WORKSPACE_DEPENDENCY: Provide(provide_workspace, sync_to_thread=False),
    "if_match": Provide(provide_if_match, sync_to_thread=False),
}
