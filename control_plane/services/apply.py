"""``crank apply``: bring a workspace to what an operation file says, or say why not.

1. **Check** (no database writes): every operation and agent is validated,
   names are unique within the file, every operation an agent binds is in
   the file or already in the workspace, and the linter finds no errors (with
   or without publishing: the file is what CI checks). Any error stops here;
   the plan lists them with paths into the file (``operations[2].request.url``)
   and, for lint errors, every finding.
2. **Lock**: a transaction-scoped advisory lock per workspace serializes
   concurrent applies (rows that do not exist yet cannot be locked), and the
   existing rows the file names are locked ``FOR UPDATE`` in id order, so an
   editor in the UI waits for the apply instead of interleaving with it.
3. **Write**, identity providers first (created, or their settings replaced;
   the agents may name them), then operations as one batch (``services.apply_operations``:
   a fixed number of statements for any number of operations), then agents,
   each through its service. Both decide what changed by structural equality
   of the ``spec_to_builtins`` forms and write nothing when nothing changed. An agent that lists
   ``webhooks`` gets exactly those subscriptions (``services.webhooks.sync_webhooks``:
   same URL, events and format are kept; the plan carries a created one's
   signing secret once, and none in a dry run). The plan reports what the
   services did (a revision that moved is an update, a publish result that
   changed made a version), so it cannot disagree with them.

All of 3 runs in a savepoint. A dry run always rolls it back, so it reports
exactly what a real apply would (version numbers and publish warnings
included) and leaves nothing behind: no rows, no audit entries, no catalog
bump, no notification (Postgres drops the NOTIFYs of an aborted
subtransaction). A service refusing a write (a publish whose secret does not
exist, say) rolls the savepoint back too and the plan carries its errors, so
an apply either happens whole or not at all.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, Protocol, TypeVar

from control_plane.auth import Role, Workspace
from control_plane.errors import ApiError, NotFound
from control_plane.etag import Precondition
from control_plane.lint import (
    Finding,
    agent_resource,
    check_and_lint_file,
    file_paths,
    has_errors,
    lint_file,
    to_field_errors,
)
from control_plane.services import agents, identity_providers, operations
from control_plane.services.apply_operations import BatchRefused, write_operations
from control_plane.services.apply_plan import Action, ApplyPlan, PlanItem, PlanWarning
from control_plane.services.identity_providers import provider_errors
from control_plane.services.webhooks import sync_webhooks
from shared.crypto import SecretBox
from shared.db import Connection
from shared.engine.spec import (
    CrankFile,
    FileAgentSpec,
    IdentityProviderSpec,
    OperationSpec,
    WebhookSpec,
)
from shared.engine.spec_validation import (
    FieldError,
    validate_agent,
    validate_operation,
    validate_webhook,
)


class _Rejected(Exception):
    """A service refused a write; raised inside the savepoint to roll it back."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("apply rejected")
        self.errors = errors


# One lock namespace per workspace: hashtextextended gives the bigint key.
_LOCK_WORKSPACE: Final = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"
_LOCK_OPERATIONS: Final = """SELECT name FROM operations WHERE workspace_id = %s AND name = ANY(%s)
                              ORDER BY id FOR UPDATE"""
# Operations bound but not in the file must not vanish (discard of a never
# published draft deletes it) between the check and the agent write.
_SHARE_OPERATIONS: Final = """SELECT name FROM operations WHERE workspace_id = %s AND name = ANY(%s)
                               ORDER BY id FOR KEY SHARE"""
_LOCK_AGENTS: Final = """SELECT slug FROM agents WHERE workspace_id = %s AND slug = ANY(%s)
                          ORDER BY id FOR UPDATE"""


def _at(prefix: str, error: FieldError) -> FieldError:
    return FieldError(f"{prefix}.{error.field}" if error.field else prefix, error.message)


def _duplicates(kind: str, names: list[str], field: str) -> list[FieldError]:
    first: dict[str, int] = {}
    errors: list[FieldError] = []
    for index, name in enumerate(names):
        if name in first:
            errors.append(
                FieldError(
                    f"{kind}[{index}].{field}",
                    f"{name!r} is defined twice in the file (first at {kind}[{first[name]}])",
                )
            )
        else:
            first[name] = index
    return errors


def check_file(file: CrankFile) -> list[FieldError]:
    """Every problem the file has on its own, without looking at the workspace."""
    errors: list[FieldError] = []
    for index, provider in enumerate(file.identity_providers):
        errors += [_at(f"identity_providers[{index}]", e) for e in provider_errors(provider)]
    errors += _duplicates(
        "identity_providers", [provider.name for provider in file.identity_providers], "name"
    )
    for index, operation in enumerate(file.operations):
        errors += [_at(f"operations[{index}]", e) for e in validate_operation(operation)]
    errors += _duplicates("operations", [op.name for op in file.operations], "name")
    for index, agent in enumerate(file.agents):
        errors += [_at(f"agents[{index}]", e) for e in validate_agent(agent)]
        errors += _webhook_errors(f"agents[{index}]", agent.webhooks or [])
    errors += _duplicates("agents", [agent.slug for agent in file.agents], "slug")
    return errors


def _webhook_errors(prefix: str, webhooks: list[WebhookSpec]) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, spec in enumerate(webhooks):
        errors += [_at(f"{prefix}.webhooks[{index}]", e) for e in validate_webhook(spec)]
    keys = [f"{spec.url} {sorted(spec.events)} {spec.format}" for spec in webhooks]
    duplicates = _duplicates(f"{prefix}.webhooks", keys, "url")
    return errors + [
        FieldError(e.field, "the same subscription is listed twice") for e in duplicates
    ]


def bound_elsewhere(file: CrankFile) -> list[str]:
    """The operations the file's agents bind but the file does not hold, sorted."""
    in_file = {op.name for op in file.operations}
    return sorted({name for agent in file.agents for name in agent.operations} - in_file)


def unresolved_bindings(file: CrankFile, existing: set[str]) -> list[FieldError]:
    """Bindings to operations neither the file nor ``existing`` (the workspace's) holds."""
    known = existing | {op.name for op in file.operations}
    errors = []
    for index, agent in enumerate(file.agents):
        for position, name in enumerate(agent.operations):
            if name not in known:
                errors.append(
                    FieldError(
                        f"agents[{index}].operations[{position}]",
                        f"no operation named {name!r} in the file or the workspace",
                    )
                )
    return errors


async def _names(conn: Connection, query: str, ws: Workspace, names: list[str]) -> set[str]:
    if not names:
        return set()
    cur = await conn.execute(query, (ws.id, names))
    return {next(iter(row.values())) for row in await cur.fetchall()}


async def _lock(conn: Connection, ws: Workspace, file: CrankFile) -> set[str]:
    """Take the locks; return the names of operations the workspace already has."""
    await conn.execute(_LOCK_WORKSPACE, (f"crank.apply:{ws.id}",))
    existing = await _names(conn, _LOCK_OPERATIONS, ws, [op.name for op in file.operations])
    existing |= await _names(conn, _SHARE_OPERATIONS, ws, bound_elsewhere(file))
    await _names(conn, _LOCK_AGENTS, ws, [agent.slug for agent in file.agents])
    return existing


def _refusal(prefix: str, exc: ApiError) -> list[FieldError]:
    if exc.errors:
        return [_at(prefix, error) for error in exc.errors]
    return [FieldError(prefix, exc.message)]


class _Draft(Protocol):
    @property
    def id(self) -> int: ...
    @property
    def revision(self) -> int: ...


DraftRow = TypeVar("DraftRow", bound=_Draft)


async def _write_draft(
    row: DraftRow | None,
    create: Callable[[], Awaitable[DraftRow]],
    update: Callable[[Precondition], Awaitable[DraftRow]],
) -> tuple[DraftRow, Action]:
    """Create the resource if ``row`` (as just read) is None, else update its draft
    as of that read; a revision that did not move means nothing changed."""
    if row is None:
        return await create(), "create"
    updated = await update(Precondition(row.id, row.revision))
    return updated, "update" if updated.revision != row.revision else "unchanged"


async def _apply_agent(
    conn: Connection,
    box: SecretBox | None,
    ws: Workspace,
    actor: str,
    file_spec: FileAgentSpec,
    *,
    publish: bool,
    findings: list[Finding],
) -> PlanItem:
    spec = file_spec.agent()  # the draft; webhooks are resources of their own
    row, action = await _write_draft(
        await agents.get_agent(conn, ws.id, spec.slug),
        lambda: agents.create_agent(conn, ws, actor, spec),
        lambda expected: agents.update_agent_draft(conn, ws, actor, spec.slug, spec, expected),
    )
    item = PlanItem(kind="agent", name=spec.slug, action=action)
    if file_spec.webhooks is not None:
        if box is None:  # a caller without the operator's key (the demo seed) cannot seal
            raise RuntimeError("apply_file needs the SecretBox for a file with webhooks")
        item.webhooks = await sync_webhooks(conn, box, ws, actor, spec.slug, file_spec.webhooks)
    if publish:
        # A no-op when the published state already equals the draft; the catalog
        # resolves bound operations to their latest versions by itself, so an
        # operation published above reaches the agent without a new agent version.
        result = await agents.publish_agent(
            conn, ws, actor, spec.slug, Precondition(row.id, row.revision), findings=findings
        )
        row = result.agent
        item.publish = result.changed
        item.warnings = [PlanWarning(code=w.code, message=w.message) for w in result.warnings]
    item.version = row.published_version if row.published is not None else None
    return item


async def _apply_provider(
    conn: Connection, ws: Workspace, actor: str, index: int, spec: IdentityProviderSpec
) -> PlanItem:
    """Create the provider or replace its settings (the apply lock stands in for If-Match).

    Whom a workspace trusts is the owner's call, as in the API: an editor's apply
    may hold providers only as they are (an export applied back, say)."""
    where = f"identity_providers[{index}]"
    try:
        try:
            current = await identity_providers.require_provider(conn, ws, spec.name, lock=True)
        except NotFound:
            await identity_providers.create_provider(conn, ws, actor, spec)
            action: Action = "create"
        else:
            updated = await identity_providers.update_provider(
                conn, ws, actor, spec.name, spec, None
            )
            moved = updated.view.revision != current.view.revision
            action = "update" if moved else "unchanged"
    except ApiError as exc:
        raise _Rejected(_refusal(where, exc)) from None
    if action != "unchanged" and ws.role < Role.OWNER:
        message = f"changing identity providers needs the owner role; you are {ws.role.label}"
        raise _Rejected([FieldError(where, message)])
    return PlanItem(kind="identity_provider", name=spec.name, action=action)


async def _write(
    conn: Connection,
    box: SecretBox | None,
    ws: Workspace,
    actor: str,
    file: CrankFile,
    *,
    publish: bool,
    findings: list[Finding],
) -> list[PlanItem]:
    # Providers first: the agents below may name them.
    items = [
        await _apply_provider(conn, ws, actor, index, provider)
        for index, provider in enumerate(file.identity_providers)
    ]
    try:
        written = await write_operations(conn, ws, actor, file.operations, publish=publish)
    except BatchRefused as exc:
        raise _Rejected(exc.errors) from None
    items += [
        PlanItem(
            kind="operation",
            name=op.name,
            action=op.action,
            publish=op.published,
            version=op.version,
        )
        for op in written
    ]
    by_agent: dict[str, list[Finding]] = {}
    for found in findings:
        by_agent.setdefault(found.resource, []).append(found)
    for index, agent in enumerate(file.agents):
        linted = by_agent.get(agent_resource(agent.slug), [])
        try:
            items.append(
                await _apply_agent(conn, box, ws, actor, agent, publish=publish, findings=linted)
            )
        except ApiError as exc:
            raise _Rejected(_refusal(f"agents[{index}]", exc)) from None
    return items


async def _stored_specs(
    conn: Connection, ws: Workspace, file: CrankFile
) -> dict[str, OperationSpec]:
    """What the operations the file binds but does not hold serve in ``ws``."""
    return await operations.serving_specs(conn, ws.id, bound_elsewhere(file))


async def lint_in_workspace(conn: Connection, ws: Workspace, file: CrankFile) -> list[Finding]:
    """What the lint API answers for ``file``: its validation errors and unresolved
    bindings as ``spec-invalid`` findings, then every lint finding, agents linted
    against the file's operations and the workspace's for the rest. Writes nothing."""
    stored = await _stored_specs(conn, ws, file)
    invalid = check_file(file) + unresolved_bindings(file, set(stored))
    return check_and_lint_file(file, invalid, stored)


async def apply_file(
    conn: Connection,
    ws: Workspace,
    actor: str,
    file: CrankFile,
    *,
    publish: bool,
    dry_run: bool,
    box: SecretBox | None = None,
) -> ApplyPlan:
    """Apply ``file`` to ``ws`` inside the caller's transaction and report the plan.

    With errors in the plan nothing was written. The caller commits; locks are
    held until then, so concurrent applies to one workspace run one at a time.
    """
    plan = ApplyPlan(workspace=ws.slug, dry_run=dry_run)
    plan.errors = check_file(file)
    if plan.errors:
        return plan
    existing = await _lock(conn, ws, file)
    plan.errors = unresolved_bindings(file, existing)
    if plan.errors:
        return plan
    plan.findings = lint_file(file, await _stored_specs(conn, ws, file))
    if has_errors(plan.findings):
        plan.errors = to_field_errors(plan.findings, file_paths(file))
        return plan
    try:
        async with conn.transaction(force_rollback=dry_run):
            plan.items = await _write(
                conn, box, ws, actor, file, publish=publish, findings=plan.findings
            )
    except _Rejected as exc:
        plan.errors = exc.errors
        return plan
    if dry_run:  # rolled back: those subscriptions and their secrets do not exist
        for item in plan.items:
            for change in item.webhooks:
                change.secret = None
    plan.changed = any(
        item.action != "unchanged" or item.publish or item.webhooks for item in plan.items
    )
    return plan
