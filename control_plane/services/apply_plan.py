"""What ``crank apply`` did or would do: the plan the apply route answers and the CLI prints.

Its own module, light on imports, so that the ``crank apply`` process loads
the plan's types without the control plane's server stack (Litestar, the
database driver, the outbound HTTP client): docs/performance.md, "Applying
a large file".
"""

from __future__ import annotations

from typing import Literal

import msgspec

from control_plane.lint.findings import Finding
from shared.engine.spec_validation import FieldError

Kind = Literal["identity_provider", "operation", "agent"]
Action = Literal["create", "update", "unchanged"]


class WebhookChange(msgspec.Struct, kw_only=True):
    """What ``crank apply`` did, or would do, to one subscription of an agent."""

    action: Literal["create", "delete"]
    id: str
    url: str
    events: list[str]
    format: str
    secret: str | None = None  # a subscription created by a real apply: shown this once


class PlanWarning(msgspec.Struct, kw_only=True, frozen=True):
    code: str
    message: str


class PlanItem(msgspec.Struct, kw_only=True):
    """What the apply did, or would do, to one identity provider, operation or agent."""

    kind: Kind
    name: str
    action: Action
    publish: bool = False  # True: this apply published it (a new version)
    version: int | None = None  # the latest published version after the apply
    warnings: list[PlanWarning] = msgspec.field(default_factory=list)
    # An agent's webhook subscriptions created or revoked (docs/operation-file.md,
    # "Webhooks"); a created one's signing secret is here once, never in a dry run.
    webhooks: list[WebhookChange] = msgspec.field(default_factory=list)


class ApplyPlan(msgspec.Struct, kw_only=True):
    """What ``crank apply`` changed or would change, or the errors that stopped it."""

    workspace: str
    dry_run: bool
    changed: bool = False
    items: list[PlanItem] = msgspec.field(default_factory=list)
    errors: list[FieldError] = msgspec.field(default_factory=list)
    findings: list[Finding] = msgspec.field(default_factory=list)  # the linter's, all resources
