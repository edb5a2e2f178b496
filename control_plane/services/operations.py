"""Operations: one editable draft and immutable published versions 1, 2, ...

The draft and every version are stored as jsonb in the form
``spec_to_builtins`` gives (every field present), so "unchanged" is plain
structural equality, in Python and in SQL alike.

Writes lock the operation row (``FOR UPDATE``) for the rest of the
transaction, so two concurrent publishes cannot both make version N+1; the
``(operation_id, version)`` primary key is the backstop. ``revision`` counts
changes of the draft: a publish leaves it alone (the draft did not change),
a rollback or a discard that rewrites the draft bumps it. A write that would
change nothing (the same draft again, a publish of what is already the latest
version) changes nothing: no revision, no version, no audit row — so a second
``crank apply`` is a no-op.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final, Literal

import msgspec
from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from control_plane.auth import Workspace
from control_plane.errors import Conflict, LintFailed, NotFound, ValidationFailed
from control_plane.etag import Precondition, check_revision
from control_plane.lint import Finding, has_errors, lint_operation, to_field_errors
from control_plane.services.audit import record_change
from control_plane.services.catalog import bump_catalog
from control_plane.services.constraints import refuse_check_violations
from shared.db import Connection
from shared.engine.argument_limits import child_path
from shared.engine.spec import OperationSpec, operation_from_builtins, spec_to_builtins
from shared.engine.spec_validation import FieldError, validate_operation


class OperationRow(msgspec.Struct, kw_only=True):
    id: int
    name: str
    draft: dict[str, Any]
    revision: int
    latest_version: int | None
    latest_spec: dict[str, Any] | None
    created_at: datetime
    updated_at: datetime

    @property
    def draft_changed(self) -> bool:
        """True when publishing now would make a new version."""
        return self.draft != self.latest_spec


class OperationSummary(msgspec.Struct, kw_only=True):
    name: str
    title: str | None
    method: str
    url: str
    revision: int
    latest_version: int | None
    draft_changed: bool
    updated_at: datetime


class PublishResult(msgspec.Struct, kw_only=True):
    name: str
    version: int  # the latest version after the call
    changed: bool  # False: the draft already was the latest version, nothing was made
    revision: int  # the draft's revision after the call
    findings: list[Finding] = msgspec.field(default_factory=list)  # the linter's, warnings


class DiscardResult(msgspec.Struct, kw_only=True):
    name: str
    deleted: bool  # True: never published, so the whole operation is gone
    revision: int | None  # the draft's revision after the reset; None when deleted
    latest_version: int | None


class VersionInfo(msgspec.Struct, kw_only=True):
    version: int
    published_at: datetime
    published_by: str


class VersionRow(msgspec.Struct, kw_only=True):
    version: int
    spec: dict[str, Any]
    published_at: datetime
    published_by: str


class Change(msgspec.Struct, kw_only=True):
    """One difference between two specs, at ``path``."""

    path: str  # "" is the whole spec; else "request.url", "input.required[1]", "headers['a.b']"
    kind: Literal["added", "removed", "changed"]
    before: Any
    after: Any


class Diff(msgspec.Struct, kw_only=True):
    name: str
    latest_version: int | None  # what the draft is compared with; None: nothing published yet
    revision: int
    changes: list[Change]


DRAFT: Final[Literal["draft"]] = "draft"
SpecRef = int | Literal["draft"]
"""One spec of an operation: a published version's number, or ``DRAFT``."""


def parse_spec_ref(text: str) -> SpecRef | None:
    """``draft`` or a version number (1 and up) as a query sends it; None for anything else."""
    if text == DRAFT:
        return DRAFT
    if text.isascii() and text.isdigit() and len(text) <= 9 and int(text) > 0:
        return int(text)
    return None


class Comparison(msgspec.Struct, kw_only=True):
    """What turns the spec ``before`` into the spec ``after`` (any two versions or the draft)."""

    name: str
    before: SpecRef
    after: SpecRef
    revision: int
    changes: list[Change]


class LintCounts(msgspec.Struct, kw_only=True, frozen=True):
    errors: int
    warnings: int


# A list filter: never published, published and the draft is that version, or the
# draft differs from the latest version.
ListState = Literal["draft", "published", "ahead"]
_STATE_CONDITIONS: Final[dict[ListState, str]] = {
    "draft": "o.latest_version IS NULL",
    "published": "o.latest_version IS NOT NULL AND o.draft = v.spec",
    "ahead": "o.latest_version IS NOT NULL AND o.draft IS DISTINCT FROM v.spec",
}


_SELECT: Final = """
    SELECT o.id, o.name, o.draft, o.revision, o.latest_version, v.spec AS latest_spec,
           o.created_at, o.updated_at
      FROM operations o
      LEFT JOIN operation_versions v ON v.operation_id = o.id AND v.version = o.latest_version
     WHERE o.workspace_id = %s AND o.name = %s"""


def _row(values: dict[str, Any]) -> OperationRow:
    return OperationRow(**values)


async def get_operation(conn: Connection, workspace_id: int, name: str) -> OperationRow | None:
    cur = await conn.execute(_SELECT, (workspace_id, name))
    values = await cur.fetchone()
    return None if values is None else _row(values)


async def lock_operation(
    conn: Connection, ws: Workspace, name: str, expected: Precondition | None
) -> OperationRow:
    """The operation, locked until the transaction ends; 404 if there is none, 409
    if it is not the one ``expected`` names (``None`` skips that check).

    Two statements on purpose: after waiting for the lock, READ COMMITTED
    re-reads the locked row but not rows joined to it, so a one-statement
    ``... LEFT JOIN operation_versions ... FOR UPDATE`` would pair a concurrent
    publisher's new ``latest_version`` with no spec. The second statement takes
    a fresh snapshot that sees everything the lock holder committed.
    """
    cur = await conn.execute(
        "SELECT id FROM operations WHERE workspace_id = %s AND name = %s FOR UPDATE",
        (ws.id, name),
    )
    if await cur.fetchone() is None:
        raise NotFound(f"operation {name!r} not found in workspace {ws.slug!r}")
    row = await get_operation(conn, ws.id, name)
    assert row is not None  # locked: nobody can delete it now
    if expected is not None:
        check_revision(expected, row.id, row.revision, f"operation {name!r}")
    return row


async def require_operation(conn: Connection, ws: Workspace, name: str) -> OperationRow:
    """The operation; raises NotFound (404)."""
    row = await get_operation(conn, ws.id, name)
    if row is None:
        raise NotFound(f"operation {name!r} not found in workspace {ws.slug!r}")
    return row


async def serving_specs(
    conn: Connection, workspace_id: int, names: list[str]
) -> dict[str, OperationSpec]:
    """The spec each named operation serves, or will once published: its latest
    published version, else its draft. What the agent linter compares; names
    that do not exist and specs stored before a format change are left out."""
    cur = await conn.execute(
        """SELECT o.name, coalesce(v.spec, o.draft) AS spec
             FROM operations o
             LEFT JOIN operation_versions v
                    ON v.operation_id = o.id AND v.version = o.latest_version
            WHERE o.workspace_id = %s AND o.name = ANY(%s)""",
        (workspace_id, names),
    )
    specs: dict[str, OperationSpec] = {}
    for row in await cur.fetchall():
        try:
            specs[row["name"]] = operation_from_builtins(row["spec"])
        except msgspec.ValidationError:
            continue
    return specs


def _like_pattern(text: str) -> str:
    """``text`` as a case-insensitive substring pattern, its LIKE wildcards taken literally."""
    escaped = text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"%{escaped}%"


async def list_operations(
    conn: Connection,
    workspace_id: int,
    *,
    after: str | None = None,
    limit: int = 100,
    state: ListState | None = None,
    text: str | None = None,
) -> tuple[list[OperationSummary], str | None]:
    """One page ordered by name, and the cursor of the next page (None at the end).

    ``state`` keeps the operations in that publish state; ``text`` those whose
    name or draft title contains it, ignoring case."""
    conditions = ["o.workspace_id = %s", "(%s::text IS NULL OR o.name > %s)"]
    params: list[Any] = [workspace_id, after, after]
    if state is not None:
        conditions.append(_STATE_CONDITIONS[state])
    if text:
        conditions.append("(o.name ILIKE %s OR o.draft ->> 'title' ILIKE %s)")
        params += [_like_pattern(text)] * 2
    cur = await conn.execute(
        f"""SELECT o.name, o.draft ->> 'title' AS title,
                  o.draft -> 'request' ->> 'method' AS method,
                  o.draft -> 'request' ->> 'url' AS url,
                  o.revision, o.latest_version,
                  o.draft IS DISTINCT FROM v.spec AS draft_changed, o.updated_at
             FROM operations o
             LEFT JOIN operation_versions v
                    ON v.operation_id = o.id AND v.version = o.latest_version
            WHERE {" AND ".join(conditions)}
            ORDER BY o.name
            LIMIT %s""",
        (*params, limit + 1),
    )
    rows = await cur.fetchall()
    items = [OperationSummary(**values) for values in rows[:limit]]
    next_cursor = items[-1].name if len(rows) > limit else None
    return items, next_cursor


async def draft_lint_counts(
    conn: Connection, workspace_id: int, names: list[str]
) -> dict[str, LintCounts]:
    """How many lint errors and warnings each named operation's draft has.

    The linter remembers its answers by the spec's content (shared/engine/spec_memo.py),
    so listing the same drafts again costs a decode and a digest each, not a lint."""
    cur = await conn.execute(
        "SELECT name, draft FROM operations WHERE workspace_id = %s AND name = ANY(%s)",
        (workspace_id, names),
    )
    counts: dict[str, LintCounts] = {}
    for row in await cur.fetchall():
        findings = lint_stored(row["draft"])
        errors = sum(1 for f in findings if f.severity == "error")
        counts[row["name"]] = LintCounts(errors=errors, warnings=len(findings) - errors)
    return counts


def _validate(spec: OperationSpec) -> None:
    errors = validate_operation(spec)
    if errors:
        raise ValidationFailed(errors)


async def create_operation(
    conn: Connection, ws: Workspace, actor: str, spec: OperationSpec
) -> OperationRow:
    _validate(spec)
    try:
        # A savepoint: the caller's transaction stays usable.
        with refuse_check_violations():
            async with conn.transaction():
                await conn.execute(
                    "INSERT INTO operations (workspace_id, name, draft) VALUES (%s, %s, %s)",
                    (ws.id, spec.name, Jsonb(spec_to_builtins(spec))),
                )
    except pg_errors.UniqueViolation:
        raise Conflict(
            f"operation {spec.name!r} already exists in workspace {ws.slug!r}",
            code="already_exists",
        ) from None
    await record_change(conn, ws, actor, "operation.create", spec.name, {"revision": 1})
    row = await get_operation(conn, ws.id, spec.name)
    assert row is not None
    return row


async def _set_draft(conn: Connection, row: OperationRow, draft: dict[str, Any]) -> OperationRow:
    cur = await conn.execute(
        """UPDATE operations SET draft = %s, revision = revision + 1, updated_at = now()
            WHERE id = %s RETURNING revision, updated_at""",
        (Jsonb(draft), row.id),
    )
    values = await cur.fetchone()
    assert values is not None
    return msgspec.structs.replace(row, draft=draft, **values)


async def update_operation_draft(
    conn: Connection,
    ws: Workspace,
    actor: str,
    name: str,
    spec: OperationSpec,
    expected: Precondition | None,
) -> OperationRow:
    """Replace the draft. ``expected`` None: the caller already holds the lock."""
    if spec.name != name:
        raise ValidationFailed(
            [FieldError("name", f"the body names {spec.name!r} but the URL names {name!r}")]
        )
    row = await lock_operation(conn, ws, name, expected)
    _validate(spec)
    draft = spec_to_builtins(spec)
    if draft == row.draft:
        return row
    row = await _set_draft(conn, row, draft)
    await record_change(conn, ws, actor, "operation.update", name, {"revision": row.revision})
    return row


async def discard_draft(
    conn: Connection, ws: Workspace, actor: str, name: str, expected: Precondition | None
) -> DiscardResult:
    """Reset the draft to the latest version; an operation never published is deleted."""
    row = await lock_operation(conn, ws, name, expected)
    if row.latest_spec is None:
        await conn.execute("DELETE FROM operations WHERE id = %s", (row.id,))
        result = DiscardResult(name=name, deleted=True, revision=None, latest_version=None)
    elif row.draft_changed:
        row = await _set_draft(conn, row, row.latest_spec)
        result = DiscardResult(
            name=name, deleted=False, revision=row.revision, latest_version=row.latest_version
        )
    else:  # the draft already is the latest version: nothing to discard
        return DiscardResult(
            name=name, deleted=False, revision=row.revision, latest_version=row.latest_version
        )
    await record_change(
        conn,
        ws,
        actor,
        "operation.discard_draft",
        name,
        {"deleted": result.deleted, "latest_version": result.latest_version},
    )
    return result


def lint_stored(spec_value: dict[str, Any]) -> list[Finding]:
    """The linter's findings of a stored spec; none for one stored before a format change."""
    try:
        return lint_operation(operation_from_builtins(spec_value))
    except msgspec.ValidationError:
        return []


async def _check_publishable(
    conn: Connection, ws: Workspace, spec_value: dict[str, Any]
) -> list[Finding]:
    """What every publish checks again: the spec is valid, its secrets exist and the
    linter finds no errors. Returns the linter's findings (warnings only).

    The secret row is locked ``FOR KEY SHARE`` until the transaction ends, so
    a concurrent delete of it waits for this publish instead of leaving a
    published version that names a secret that is gone.
    """
    try:
        spec = operation_from_builtins(spec_value)
    except msgspec.ValidationError as exc:  # stored before a format change
        raise ValidationFailed([FieldError("", str(exc))]) from None
    errors = validate_operation(spec)
    references = [
        (f"{where}.{field}", secret)
        for where, auth in spec.request.auth_entries()
        for field, secret in auth.secret_references()
    ]
    for field, secret in references:
        cur = await conn.execute(
            "SELECT 1 FROM secrets WHERE workspace_id = %s AND name = %s FOR KEY SHARE",
            (ws.id, secret),
        )
        if await cur.fetchone() is None:
            errors.append(
                FieldError(
                    field,
                    f"secret {secret!r} does not exist in workspace {ws.slug!r}; "
                    "set it first (crank secrets set)",
                )
            )
    if errors:
        raise ValidationFailed(errors)
    findings = lint_operation(spec)
    if has_errors(findings):
        raise LintFailed(to_field_errors(findings), findings, f"operation {spec.name!r}")
    return findings


async def _new_version(
    conn: Connection, ws: Workspace, actor: str, row: OperationRow, spec: dict[str, Any]
) -> int:
    """Insert version latest+1 of the locked ``row`` and point the operation at it."""
    version = (row.latest_version or 0) + 1
    try:
        async with conn.transaction():
            await conn.execute(
                """INSERT INTO operation_versions (operation_id, version, spec, published_by)
                   VALUES (%s, %s, %s, %s)""",
                (row.id, version, Jsonb(spec), actor),
            )
    except pg_errors.UniqueViolation:  # only without the row lock; kept as the backstop
        raise Conflict(
            f"version {version} of operation {row.name!r} was published concurrently; retry",
            code="stale_revision",
        ) from None
    await conn.execute(
        "UPDATE operations SET latest_version = %s, updated_at = now() WHERE id = %s",
        (version, row.id),
    )
    # Simplest correct rule: any agent bound to this operation may serve it now.
    await bump_catalog(conn)
    return version


async def publish_operation(
    conn: Connection, ws: Workspace, actor: str, name: str, expected: Precondition | None
) -> PublishResult:
    """Publish the draft as version latest+1; no version when it is the latest already."""
    row = await lock_operation(conn, ws, name, expected)
    if not row.draft_changed:  # nothing is published, so nothing is blocked
        assert row.latest_version is not None
        return PublishResult(
            name=name,
            version=row.latest_version,
            changed=False,
            revision=row.revision,
            findings=lint_stored(row.draft),
        )
    findings = await _check_publishable(conn, ws, row.draft)
    version = await _new_version(conn, ws, actor, row, row.draft)
    await record_change(
        conn, ws, actor, "operation.publish", name, {"version": version, "revision": row.revision}
    )
    return PublishResult(
        name=name, version=version, changed=True, revision=row.revision, findings=findings
    )


async def rollback_operation(
    conn: Connection,
    ws: Workspace,
    actor: str,
    name: str,
    version: int,
    expected: Precondition | None,
) -> PublishResult:
    """Publish an earlier version's spec as a new version and make it the draft too."""
    row = await lock_operation(conn, ws, name, expected)
    target = await get_version(conn, ws, name, version)
    republish = target.spec != row.latest_spec
    findings: list[Finding] = []
    if republish:
        findings = await _check_publishable(conn, ws, target.spec)
    elif target.spec == row.draft:  # already the latest version and the draft
        assert row.latest_version is not None
        return PublishResult(
            name=name, version=row.latest_version, changed=False, revision=row.revision
        )
    if target.spec != row.draft:
        row = await _set_draft(conn, row, target.spec)
    if republish:
        latest = await _new_version(conn, ws, actor, row, target.spec)
    else:  # the draft is reset to the latest version, which already has this spec
        assert row.latest_version is not None
        latest = row.latest_version
    await record_change(
        conn,
        ws,
        actor,
        "operation.rollback",
        name,
        {"from_version": version, "version": latest, "revision": row.revision},
    )
    return PublishResult(
        name=name, version=latest, changed=republish, revision=row.revision, findings=findings
    )


async def list_versions(conn: Connection, ws: Workspace, name: str) -> list[VersionInfo]:
    """Newest first."""
    row = await require_operation(conn, ws, name)
    cur = await conn.execute(
        """SELECT version, published_at, published_by FROM operation_versions
            WHERE operation_id = %s ORDER BY version DESC""",
        (row.id,),
    )
    return [VersionInfo(**values) for values in await cur.fetchall()]


async def get_version(conn: Connection, ws: Workspace, name: str, version: int) -> VersionRow:
    cur = await conn.execute(
        """SELECT v.version, v.spec, v.published_at, v.published_by
             FROM operation_versions v JOIN operations o ON o.id = v.operation_id
            WHERE o.workspace_id = %s AND o.name = %s AND v.version = %s""",
        (ws.id, name, version),
    )
    values = await cur.fetchone()
    if values is None:
        await require_operation(conn, ws, name)  # say which of the two is missing
        raise NotFound(f"operation {name!r} has no version {version}")
    return VersionRow(**values)


async def diff_operation(conn: Connection, ws: Workspace, name: str) -> Diff:
    """The draft against the latest published version."""
    row = await require_operation(conn, ws, name)
    return Diff(
        name=name,
        latest_version=row.latest_version,
        revision=row.revision,
        changes=diff_values(row.latest_spec, row.draft),
    )


async def _spec_at(conn: Connection, ws: Workspace, row: OperationRow, ref: SpecRef) -> Any:
    if ref == DRAFT:
        return row.draft
    assert isinstance(ref, int)
    if ref == row.latest_version:
        return row.latest_spec
    return (await get_version(conn, ws, row.name, ref)).spec


async def compare_operation(
    conn: Connection, ws: Workspace, name: str, before: SpecRef | None, after: SpecRef
) -> Comparison:
    """Any two of an operation's specs (published versions or the draft), compared;
    ``before`` None is the latest version. 404 for a version it does not have."""
    row = await require_operation(conn, ws, name)
    if before is None:
        if row.latest_version is None:
            raise NotFound(f"operation {name!r} has no published version yet")
        before = row.latest_version
    return Comparison(
        name=name,
        before=before,
        after=after,
        revision=row.revision,
        changes=diff_values(
            await _spec_at(conn, ws, row, before), await _spec_at(conn, ws, row, after)
        ),
    )


def diff_values(before: Any, after: Any, path: str = "") -> list[Change]:
    """The changes that turn one JSON value into another, in document order.

    Objects are compared key by key and arrays index by index; anything else
    (including a change of type) is one change at its path. A key missing on
    one side is ``added``/``removed`` with None on that side.
    """
    if isinstance(before, dict) and isinstance(after, dict):
        changes: list[Change] = []
        for key in [*before, *(k for k in after if k not in before)]:
            child = child_path(path, key)
            if key not in after:
                changes.append(Change(path=child, kind="removed", before=before[key], after=None))
            elif key not in before:
                changes.append(Change(path=child, kind="added", before=None, after=after[key]))
            else:
                changes += diff_values(before[key], after[key], child)
        return changes
    if isinstance(before, list) and isinstance(after, list):
        changes = []
        for index in range(max(len(before), len(after))):
            child = child_path(path, index)
            if index >= len(after):
                changes.append(Change(path=child, kind="removed", before=before[index], after=None))
            elif index >= len(before):
                changes.append(Change(path=child, kind="added", before=None, after=after[index]))
            else:
                changes += diff_values(before[index], after[index], child)
        return changes
    if before == after and type(before) is type(after):
        return []
    if before is None and path == "":
        return [Change(path="", kind="added", before=None, after=after)]
    return [Change(path=path, kind="changed", before=before, after=after)]
