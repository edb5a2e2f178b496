"""Admin API routes, one module per resource, all mounted under ``/api/v1``."""

from __future__ import annotations

from typing import Any

from control_plane.routes import (
    agents,
    apply,
    audit,
    calls,
    egress,
    export,
    identity_providers,
    imports,
    keys,
    lint,
    operations,
    secrets,
    try_it,
    webhooks,
)
from control_plane.routes.workspaces import WorkspaceController, me

route_handlers: list[Any] = [
    me,
    WorkspaceController,
    *operations.handlers,
    *try_it.handlers,
    *agents.handlers,
    *keys.handlers,
    *secrets.handlers,
    *webhooks.handlers,
    *egress.handlers,
    *identity_providers.handlers,
    *audit.handlers,
    *calls.handlers,
    *apply.handlers,
    *export.handlers,
    *lint.handlers,
    *imports.handlers,
]
