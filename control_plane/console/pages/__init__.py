"""The console's pages, a module per area; each lists its route handlers in ``handlers``."""

from __future__ import annotations

from typing import Any

from control_plane.console.pages import approvals, audit, calls, home, sign_in

route_handlers: list[Any] = [
    *sign_in.handlers,
    *home.handlers,
    *approvals.handlers,
    *calls.handlers,
    *audit.handlers,
]
