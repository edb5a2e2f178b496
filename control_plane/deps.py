"""Litestar dependencies every route uses: the process state, a connection, the caller."""

from __future__ import annotations

from collections.abc import AsyncGenerator
from typing import Any

from litestar import Request
from litestar.datastructures import State
from litestar.di import NamedDependency, Provide

from control_plane.auth import Principal, authenticate, bearer_token
from control_plane.state import AppState
from shared.db import Connection

# Handlers annotate injected parameters with these (Litestar 3 drops inferred injection).
DbConn = NamedDependency[Connection]
Caller = NamedDependency[Principal]
CrankState = NamedDependency[AppState]


def provide_state(state: State) -> AppState:
    app_state = state["crank"]
    assert isinstance(app_state, AppState)
    return app_state


async def provide_conn(app_state: CrankState) -> AsyncGenerator[Connection, None]:
    """One connection and one transaction per request: committed when the handler
    returns, rolled back when it raises, so a failed write changes nothing."""
    async with app_state.pool.connection() as conn:
        yield conn


async def provide_principal(
    request: Request[Any, Any, Any], conn: DbConn, app_state: CrankState
) -> Principal:
    return await authenticate(conn, app_state, bearer_token(request))


dependencies = {
    "app_state": Provide(provide_state, sync_to_thread=False),
    "conn": Provide(provide_conn),
    "principal": Provide(provide_principal),
}
