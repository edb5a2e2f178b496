"""Agents: a draft (title, description, bound operation names, rate limit,
confirmation mode) and a published state that the gateways serve.

``revision`` versions the *draft*: every draft change bumps it and writes must
name the agent and revision they read (``expected``, from ``If-Match``; ``None``
skips the check). Publish and unpublish take the same check, so a publish
always publishes the draft its caller saw, but they leave ``revision`` alone:
an editor's draft work is not invalidated by a colleague publishing.

``published`` is ``{title, description, operations, rate_limit, confirmation_mode}``
(plus ``approval_wait_s`` when set) or NULL (rows published before
``confirmation_mode`` existed lack it: ``auto``).
``published_version`` counts publishes and never goes back, so it still holds
the last number after an unpublish. The catalog of an agent is its published
operation names resolved to each operation's latest published version; a name
whose operation has none yet stays in the list and appears once that
operation is published.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

import msgspec
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from control_plane.auth import Workspace
from control_plane.errors import Conflict, LintFailed, NotFound, ValidationFailed
from control_plane.etag import Precondition, check_revision
from control_plane.lint import Finding, has_errors, lint_agent, to_field_errors
from control_plane.services.agent_identity import unknown_providers
from control_plane.services.audit import record_change
from control_plane.services.constraints import refuse_check_violations
from control_plane.services.operations import serving_specs
from shared.db import Connection
from shared.engine.spec import AgentSpec, agent_from_builtins, spec_to_builtins
from shared.engine.spec_validation import FieldError, validate_agent

_COLUMNS = (
    "id, slug, draft, revision, published, published_version, published_at, created_at, updated_at"
)


@dataclass(frozen=True, slots=True)
class AgentRow:
    """An agent's row: the editable ``draft`` and the ``published`` state the gateways serve."""

    id: int
    slug: str
    draft: dict[str, Any]  # AgentSpec builtins
    revision: int
    published: dict[str, Any] | None  # {title, description, operations, rate_limit, ...}
    published_version: int
    published_at: datetime | None
    created_at: datetime
    updated_at: datetime

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> AgentRow:
        return cls(**{field.name: row[field.name] for field in fields(cls)})


class PublishWarning(msgspec.Struct, kw_only=True, frozen=True):
    """A bound operation the published agent leaves out of its catalog for now, and why."""

    code: str  # operation_not_published | operation_not_found
    operation: str
    message: str


@dataclass(frozen=True, slots=True)
class AgentPublishResult:
    agent: AgentRow
    published_version: int
    changed: bool  # False: the published state already equalled the draft
    warnings: list[PublishWarning]
    findings: list[Finding]  # the linter's; warnings only when changed


def published_state(draft: dict[str, Any]) -> dict[str, Any]:
    """What a publish copies out of a draft (everything but the slug)."""
    state = spec_to_builtins(agent_from_builtins(draft))  # fills defaults a stored draft lacks
    del state["slug"]
    if state.get("approval_wait_s") is None:  # unset: states published before it stay equal
        state.pop("approval_wait_s", None)
    return state


async def list_agents(conn: Connection, workspace_id: int) -> list[AgentRow]:
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM agents WHERE workspace_id = %s ORDER BY slug", (workspace_id,)
    )
    return [AgentRow.from_row(row) for row in await cur.fetchall()]


async def get_agent(conn: Connection, workspace_id: int, slug: str) -> AgentRow | None:
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM agents WHERE workspace_id = %s AND slug = %s",
        (workspace_id, slug),
    )
    row = await cur.fetchone()
    return AgentRow.from_row(row) if row else None


async def require_agent(conn: Connection, ws: Workspace, slug: str) -> AgentRow:
    """The agent; raises NotFound (404)."""
    row = await get_agent(conn, ws.id, slug)
    if row is None:
        raise NotFound(f"agent {slug!r} not found in workspace {ws.slug!r}")
    return row


async def _lock_agent(
    conn: Connection, ws: Workspace, slug: str, expected: Precondition | None
) -> AgentRow:
    """The agent, locked until the transaction ends; 404 if there is none, 409 if
    it is not the one ``expected`` names (``None`` skips that check)."""
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM agents WHERE workspace_id = %s AND slug = %s FOR UPDATE",
        (ws.id, slug),
    )
    row = await cur.fetchone()
    if row is None:
        raise NotFound(f"agent {slug!r} not found in workspace {ws.slug!r}")
    if expected is not None:
        check_revision(expected, row["id"], row["revision"], f"agent {slug!r}")
    return AgentRow.from_row(row)


async def _update(conn: Connection, current: AgentRow, assignments: str, *values: Any) -> AgentRow:
    """Apply ``SET assignments`` (a constant, with ``%s`` for ``values``) to the locked
    agent and touch ``updated_at``; the row as it is now."""
    cur = await conn.execute(
        f"UPDATE agents SET {assignments}, updated_at = now() WHERE id = %s RETURNING {_COLUMNS}",
        (*values, current.id),
    )
    row = await cur.fetchone()
    assert row is not None
    return AgentRow.from_row(row)


async def _validate(conn: Connection, ws: Workspace, spec: AgentSpec) -> dict[str, Any]:
    """The stored draft, or ValidationFailed listing every problem (unknown
    operation names included, reported on ``operations[i]``).

    The bound operations are locked ``FOR KEY SHARE`` until the transaction
    ends, so none of them can be deleted (a discard of a never-published
    draft) between this check and the commit.
    """
    errors = validate_agent(spec)
    flagged = {error.field for error in errors}
    cur = await conn.execute(
        """SELECT name FROM operations WHERE workspace_id = %s AND name = ANY(%s)
            ORDER BY id FOR KEY SHARE""",
        (ws.id, spec.operations),
    )
    existing = {row["name"] for row in await cur.fetchall()}
    for index, name in enumerate(spec.operations):
        field = f"operations[{index}]"
        if field not in flagged and name not in existing:
            errors.append(
                FieldError(field, f"no operation named {name!r} in workspace {ws.slug!r}")
            )
    errors += await unknown_providers(conn, ws, spec.auth.providers, flagged)
    if errors:
        raise ValidationFailed(errors)
    return spec_to_builtins(spec)


async def create_agent(conn: Connection, ws: Workspace, actor: str, spec: AgentSpec) -> AgentRow:
    """Inserts the draft, audited; raises ValidationFailed, or Conflict ``already_exists``."""
    draft = await _validate(conn, ws, spec)
    try:
        with refuse_check_violations():
            async with conn.transaction():
                cur = await conn.execute(
                    f"""INSERT INTO agents (workspace_id, slug, draft) VALUES (%s, %s, %s)
                        RETURNING {_COLUMNS}""",
                    (ws.id, spec.slug, Jsonb(draft)),
                )
                row = await cur.fetchone()
    except pg_errors.UniqueViolation:
        raise Conflict(
            f"agent {spec.slug!r} already exists in workspace {ws.slug!r}", code="already_exists"
        ) from None
    assert row is not None
    await record_change(conn, ws, actor, "agent.create", spec.slug, {"operations": spec.operations})
    return AgentRow.from_row(row)


async def update_agent_draft(
    conn: Connection,
    ws: Workspace,
    actor: str,
    slug: str,
    spec: AgentSpec,
    expected: Precondition | None,
) -> AgentRow:
    """Replace the draft. A draft equal to the stored one changes nothing (same
    revision, no audit row), so applying the same file twice is a no-op."""
    if spec.slug != slug:
        raise ValidationFailed(
            [FieldError("slug", f"the body's slug {spec.slug!r} differs from the URL's {slug!r}")]
        )
    current = await _lock_agent(conn, ws, slug, expected)
    draft = await _validate(conn, ws, spec)
    if draft == current.draft:
        return current
    row = await _update(conn, current, "draft = %s, revision = revision + 1", Jsonb(draft))
    await record_change(
        conn,
        ws,
        actor,
        "agent.update",
        slug,
        {"revision": row.revision, "operations": spec.operations},
    )
    return row


async def _catalog_warnings(
    conn: Connection, ws: Workspace, operations: list[str]
) -> list[PublishWarning]:
    """Bound operations that will not be in the catalog, and why."""
    cur = await conn.execute(
        "SELECT name, latest_version FROM operations WHERE workspace_id = %s AND name = ANY(%s)",
        (ws.id, operations),
    )
    latest = {row["name"]: row["latest_version"] for row in await cur.fetchall()}
    warnings = []
    for name in operations:
        if name not in latest:
            warnings.append(
                PublishWarning(
                    code="operation_not_found",
                    operation=name,
                    message=f"operation {name!r} no longer exists; it is not in the catalog",
                )
            )
        elif latest[name] is None:
            warnings.append(
                PublishWarning(
                    code="operation_not_published",
                    operation=name,
                    message=(
                        f"operation {name!r} has no published version; it joins the catalog "
                        "when it is published"
                    ),
                )
            )
    return warnings


async def lint_agent_draft(conn: Connection, ws: Workspace, draft: dict[str, Any]) -> list[Finding]:
    """The linter's findings of an agent draft, against the specs its tools serve."""
    spec = agent_from_builtins(draft)
    return lint_agent(spec, await serving_specs(conn, ws.id, spec.operations))


async def publish_agent(
    conn: Connection,
    ws: Workspace,
    actor: str,
    slug: str,
    expected: Precondition | None,
    *,
    findings: list[Finding] | None = None,
) -> AgentPublishResult:
    """Copy the draft into the published state. Publishing a draft that equals
    the published state makes no new version (``changed=False``) and no catalog
    bump; the warnings and lint findings are reported either way, and lint
    errors refuse only a publish that would change something.

    ``findings``: the caller already linted this very draft against the specs
    its tools serve (apply lints the whole file first), so it is not linted again."""
    current = await _lock_agent(conn, ws, slug, expected)
    state = published_state(current.draft)
    warnings = await _catalog_warnings(conn, ws, state["operations"])
    if findings is None:
        findings = await lint_agent_draft(conn, ws, current.draft)
    if state == current.published:
        return AgentPublishResult(
            agent=current,
            published_version=current.published_version,
            changed=False,
            warnings=warnings,
            findings=findings,
        )
    if has_errors(findings):
        raise LintFailed(to_field_errors(findings), findings, f"agent {slug!r}")
    row = await _update(
        conn,
        current,
        "published = %s, published_version = published_version + 1, published_at = now()",
        Jsonb(state),
    )
    await record_change(
        conn,
        ws,
        actor,
        "agent.publish",
        slug,
        {
            "published_version": row.published_version,
            "revision": current.revision,
            "operations": state["operations"],
            "warnings": [w.operation for w in warnings],
        },
        notify_gateways=True,
    )
    return AgentPublishResult(
        agent=row,
        published_version=row.published_version,
        changed=True,
        warnings=warnings,
        findings=findings,
    )


async def publish_report(
    conn: Connection, ws: Workspace, row: AgentRow, *, changed: bool
) -> AgentPublishResult:
    """What ``publish_agent`` reported for ``row``, read again without writing: the
    console's page after a publish (Post/Redirect/Get) shows it from this."""
    return AgentPublishResult(
        agent=row,
        published_version=row.published_version,
        changed=changed,
        warnings=await _catalog_warnings(conn, ws, published_state(row.draft)["operations"]),
        findings=await lint_agent_draft(conn, ws, row.draft),
    )


async def unpublish_agent(
    conn: Connection, ws: Workspace, actor: str, slug: str, expected: Precondition | None
) -> AgentRow:
    """Take the agent off the gateways; unpublishing an unpublished agent is a no-op."""
    current = await _lock_agent(conn, ws, slug, expected)
    if current.published is None:
        return current
    row = await _update(conn, current, "published = NULL, published_at = NULL")
    await record_change(
        conn,
        ws,
        actor,
        "agent.unpublish",
        slug,
        {"published_version": current.published_version},
        notify_gateways=True,
    )
    return row


async def delete_agent(
    conn: Connection, ws: Workspace, actor: str, slug: str, expected: Precondition | None
) -> None:
    """Delete the agent; its API keys go with it (ON DELETE CASCADE).

    Owners only (the route declares it): keys are the owner's to manage, and
    this deletes them. The catalog is bumped unless the gateways cannot tell
    the difference: an agent that is not published and has no keys serves
    nothing and authenticates no one.
    """
    current = await _lock_agent(conn, ws, slug, expected)
    cur = await conn.execute(
        "SELECT count(*) AS keys FROM api_keys WHERE agent_id = %s", (current.id,)
    )
    keys = await cur.fetchone()
    assert keys is not None
    await conn.execute("DELETE FROM agents WHERE id = %s", (current.id,))
    was_published = current.published is not None
    await record_change(
        conn,
        ws,
        actor,
        "agent.delete",
        slug,
        {"was_published": was_published, "keys_deleted": keys["keys"]},
        notify_gateways=was_published or keys["keys"] > 0,
    )
