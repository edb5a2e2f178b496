"""The operations of an apply, written as one batch (docs/architecture.md, "Apply in batches").

``services.operations`` writes one operation per call, several round trips
each; a file of ten thousand operations made that a hundred thousand round
trips. Here the same rules run over the whole file with a fixed number of
statements, whatever its size:

- one ``SELECT`` of the rows the file names (the caller already holds their
  ``FOR UPDATE`` locks, so nothing moves under it);
- one ``INSERT ... SELECT FROM unnest(...)`` for the new operations and one
  ``UPDATE ... FROM unnest(...)`` for the drafts that changed; a draft equal
  to the stored one (structural equality of the ``spec_to_builtins`` forms)
  is left alone, as ``update_operation_draft`` leaves it;
- with ``publish``: one look-up of every secret the publishing operations
  read (``FOR KEY SHARE``, as ``_check_publishable`` takes them), one insert
  of the new versions, one update of ``latest_version``, one catalog bump;
- one insert of the audit rows, in the order the per-operation services
  would have written them, with the same actions and details.

Validation and the linter do not run again here: ``apply_file`` ran both over
the same specs before taking the locks, and refuses the file on any error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from psycopg import errors as pg_errors
from psycopg.types.json import Jsonb

from control_plane.auth import Workspace
from control_plane.services.apply_plan import Action
from control_plane.services.catalog import bump_catalog
from shared.db import Connection
from shared.engine.spec import OperationSpec, spec_to_builtins
from shared.engine.spec_validation import FieldError

_SELECT: Final = """
    SELECT o.id, o.name, o.draft, o.revision, o.latest_version, v.spec AS latest_spec
      FROM operations o
      LEFT JOIN operation_versions v ON v.operation_id = o.id AND v.version = o.latest_version
     WHERE o.workspace_id = %s AND o.name = ANY(%s)"""
# Each batch is one jsonb array parameter: psycopg encodes it with msgspec in one go,
# where a jsonb[] would be quoted element by element into an array literal in Python.
_INSERT: Final = """
    INSERT INTO operations (workspace_id, name, draft)
    SELECT %s, e.value ->> 'name', e.value -> 'draft'
      FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(value, position)
     ORDER BY e.position
    RETURNING id, name, revision"""
_UPDATE: Final = """
    UPDATE operations o SET draft = e.value -> 'draft', revision = o.revision + 1,
                            updated_at = now()
      FROM jsonb_array_elements(%s::jsonb) AS e(value)
     WHERE o.id = (e.value ->> 'id')::bigint
    RETURNING o.id, o.revision"""
_SECRETS: Final = """SELECT name FROM secrets WHERE workspace_id = %s AND name = ANY(%s)
                     ORDER BY name FOR KEY SHARE"""
_VERSIONS: Final = """
    INSERT INTO operation_versions (operation_id, version, spec, published_by)
    SELECT (e.value ->> 'id')::bigint, (e.value ->> 'version')::int, e.value -> 'spec', %s
      FROM jsonb_array_elements(%s::jsonb) AS e(value)"""
_LATEST: Final = """
    UPDATE operations o SET latest_version = (e.value ->> 'version')::int, updated_at = now()
      FROM jsonb_array_elements(%s::jsonb) AS e(value)
     WHERE o.id = (e.value ->> 'id')::bigint"""
_AUDIT: Final = """
    INSERT INTO audit_log (workspace_id, actor, action, resource_type, resource_name, details)
    SELECT %s, %s, e.value ->> 'action', 'operation', e.value ->> 'name', e.value -> 'details'
      FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY AS e(value, position)
     ORDER BY e.position"""


class BatchRefused(Exception):
    """The batch cannot be written; ``errors`` have paths into the file."""

    def __init__(self, errors: list[FieldError]) -> None:
        super().__init__("operations refused")
        self.errors = errors


@dataclass(slots=True)
class Written:
    """What the batch did to one operation, in file order."""

    name: str
    action: Action
    published: bool  # this apply made a new version
    version: int | None  # the latest published version afterwards


@dataclass(slots=True)
class _State:
    """One operation while the batch runs: its row (None: new) and its new draft."""

    index: int
    spec: OperationSpec
    draft: dict[str, Any]
    row: dict[str, Any] | None
    action: Action = "unchanged"
    id: int = 0
    revision: int = 0
    version: int | None = None  # the new version, when this apply publishes one


async def write_operations(
    conn: Connection, ws: Workspace, actor: str, specs: list[OperationSpec], *, publish: bool
) -> list[Written]:
    """Create or update every operation of ``specs`` and, with ``publish``, publish each
    whose draft is not its latest version. Raises BatchRefused (nothing is written:
    the caller's savepoint rolls back)."""
    if not specs:
        return []
    cur = await conn.execute(_SELECT, (ws.id, [spec.name for spec in specs]))
    rows = {row["name"]: row for row in await cur.fetchall()}
    states = [
        _State(index, spec, spec_to_builtins(spec), rows.get(spec.name))
        for index, spec in enumerate(specs)
    ]
    await _create(conn, ws, [state for state in states if state.row is None])
    await _update(conn, [state for state in states if state.row is not None])
    audit: list[tuple[str, str, dict[str, Any]]] = []
    for state in states:
        if state.action != "unchanged":
            audit.append(
                (f"operation.{state.action}", state.spec.name, {"revision": state.revision})
            )
        if publish and _publishes(state):
            state.version = _latest(state) + 1
            audit.append(
                (
                    "operation.publish",
                    state.spec.name,
                    {"version": state.version, "revision": state.revision},
                )
            )
    publishing = [state for state in states if state.version is not None]
    if publishing:
        await _publish(conn, ws, actor, publishing)
    if audit:
        entries = [{"action": a, "name": n, "details": d} for a, n, d in audit]
        await conn.execute(_AUDIT, (ws.id, actor, Jsonb(entries)))
    return [
        Written(
            name=state.spec.name,
            action=state.action,
            published=state.version is not None,
            version=state.version if state.version is not None else _latest(state) or None,
        )
        for state in states
    ]


def _latest(state: _State) -> int:
    return (state.row or {}).get("latest_version") or 0


def _publishes(state: _State) -> bool:
    """``OperationRow.draft_changed``: the draft is not the latest version."""
    return state.row is None or state.draft != state.row["latest_spec"]


async def _create(conn: Connection, ws: Workspace, states: list[_State]) -> None:
    if not states:
        return
    try:
        entries = [{"name": s.spec.name, "draft": s.draft} for s in states]
        cur = await conn.execute(_INSERT, (ws.id, Jsonb(entries)))
    except pg_errors.UniqueViolation:  # created since the locks were taken, outside apply
        raise BatchRefused(
            [FieldError("operations", "an operation of the file was created concurrently; retry")]
        ) from None
    except pg_errors.CheckViolation:  # the Python checks mirror every CHECK: a disagreement
        raise BatchRefused(
            [FieldError("operations", "a value is not allowed here (a database check refused it)")]
        ) from None
    created = {row["name"]: row for row in await cur.fetchall()}
    for state in states:
        row = created[state.spec.name]
        state.action, state.id, state.revision = "create", row["id"], row["revision"]


async def _update(conn: Connection, states: list[_State]) -> None:
    changed: list[_State] = []
    for state in states:
        assert state.row is not None
        state.id, state.revision = state.row["id"], state.row["revision"]
        if state.draft != state.row["draft"]:
            changed.append(state)
    if not changed:
        return
    entries = [{"id": s.id, "draft": s.draft} for s in changed]
    cur = await conn.execute(_UPDATE, (Jsonb(entries),))
    revisions = {row["id"]: row["revision"] for row in await cur.fetchall()}
    for state in changed:
        state.action, state.revision = "update", revisions[state.id]


async def _publish(conn: Connection, ws: Workspace, actor: str, states: list[_State]) -> None:
    await _check_secrets(conn, ws, states)
    entries = [{"id": s.id, "version": s.version, "spec": s.draft} for s in states]
    await conn.execute(_VERSIONS, (actor, Jsonb(entries)))
    await conn.execute(_LATEST, (Jsonb([{"id": s.id, "version": s.version} for s in states]),))
    await bump_catalog(conn)  # once per transaction is what the gateways need


async def _check_secrets(conn: Connection, ws: Workspace, states: list[_State]) -> None:
    """Every secret a publishing operation reads exists (and stays until commit)."""
    references = [
        (state.index, f"{where}.{field}", secret)
        for state in states
        for where, auth in state.spec.request.auth_entries()
        for field, secret in auth.secret_references()
    ]
    if not references:
        return
    cur = await conn.execute(_SECRETS, (ws.id, sorted({name for _, _, name in references})))
    existing = {row["name"] for row in await cur.fetchall()}
    errors = [
        FieldError(
            f"operations[{index}].{field}",
            f"secret {secret!r} does not exist in workspace {ws.slug!r}; "
            "set it first (crank secrets set)",
        )
        for index, field, secret in references
        if secret not in existing
    ]
    if errors:
        raise BatchRefused(errors)
