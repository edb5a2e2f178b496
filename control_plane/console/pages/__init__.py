"""The console's pages, a module per area; each lists its route handlers in ``handlers``."""

from __future__ import annotations

from typing import Any

from control_plane.console.pages import (
    agents,
    approvals,
    audit,
    calls,
    egress,
    home,
    identity_providers,
    keys,
    operations,
    secrets,
    sign_in,
    webhooks,
    wizard,
)

route_handlers: list[Any] = [
    *sign_in.handlers,
    *home.handlers,
    *operations.handlers,
    *wizard.handlers,
    *agents.handlers,
    *webhooks.handlers,
    *keys.handlers,
    *secrets.handlers,
    *egress.handlers,
    *identity_providers.handlers,
    *approvals.handlers,
    *calls.handlers,
    *audit.handlers,
]
