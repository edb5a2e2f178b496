"""OpenAPI import into a workspace's drafts: never a publish, never a silent overwrite.

``control_plane.openapi_import`` turns the document into operation specs;
this module decides, per operation, what happens to the workspace:

- **create**: no operation of that name yet;
- **unchanged**: the draft already equals what the document gives;
- **update**: the draft differs, and it is exactly what an earlier import
  wrote (nobody edited it since), so the new import replaces it;
- **conflict**: the draft differs and was edited since the last import, or
  was never imported (written by hand, ``crank apply``, the UI). It is left
  alone and the report carries the diff (from the current draft to the
  document's version). ``overwrite`` replaces such drafts too.

Provenance: every import (not a dry run) writes one audit-log row,
``openapi.import``, whose details map each operation it left matching the
document to a hash of that draft. A re-import reads the newest such rows
(``PROVENANCE_IMPORTS``); a draft whose hash is there was not edited since.
Once the audit log's retention has pruned those rows, the drafts count as
edited: the safe side.

Everything runs in the caller's transaction, under the same per-workspace
advisory lock as ``crank apply``, so imports and applies to one workspace run
one after the other. Each operation is validated exactly once, by the
operations service as it writes (or here, for a dry run). The linter's
findings of every operation and of the agent come with the report.
"""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import Any, Final, Literal

import msgspec

from control_plane.auth import Workspace
from control_plane.errors import ApiError, ValidationFailed
from control_plane.etag import Precondition
from control_plane.lint import Finding, lint_agent, lint_operation
from control_plane.openapi_import import ImportResult, Note, SecretNeeded, Skipped, SourceInfo
from control_plane.services import agents, operations
from control_plane.services.audit import record_change
from control_plane.services.operations import Change, diff_values
from shared.db import Connection
from shared.engine.spec import AgentSpec, OperationSpec, spec_to_builtins
from shared.engine.spec_validation import FieldError, validate_agent, validate_operation

PROVENANCE_IMPORTS: Final = 100
MAX_CHANGES_SHOWN: Final = 50
_LOCK_WORKSPACE: Final = "SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))"  # as apply's
_LOCK_OPERATIONS: Final = """SELECT o.id, o.name, o.draft, o.revision FROM operations o
                              WHERE o.workspace_id = %s AND o.name = ANY(%s)
                              ORDER BY o.id FOR UPDATE"""
_PROVENANCE: Final = """SELECT details -> 'operations' AS operations FROM audit_log
                         WHERE workspace_id = %s AND action = 'openapi.import'
                         ORDER BY id DESC LIMIT %s"""
_canonical = msgspec.json.Encoder(order="sorted")


class ImportConflict(msgspec.Struct, kw_only=True):
    """An operation the import left alone (edited since, or never imported), with the diff."""

    name: str
    reason: Literal["edited_since_import", "not_imported"]
    changes: list[Change]  # from the current draft to the document's version
    more_changes: int = 0  # changes beyond the ones listed


class AgentOutcome(msgspec.Struct, kw_only=True):
    slug: str
    action: Literal["create", "update", "unchanged"]
    added: list[str]  # operations newly bound by this import


class ImportReport(msgspec.Struct, kw_only=True):
    """What an import did, or would do, to the workspace's drafts, and what to read about it."""

    workspace: str
    dry_run: bool
    overwrite: bool
    source: SourceInfo
    created: list[str] = msgspec.field(default_factory=list)
    updated: list[str] = msgspec.field(default_factory=list)
    unchanged: list[str] = msgspec.field(default_factory=list)
    conflicts: list[ImportConflict] = msgspec.field(default_factory=list)
    skipped: list[Skipped] = msgspec.field(default_factory=list)
    notes: list[Note] = msgspec.field(default_factory=list)
    secrets: list[SecretNeeded] = msgspec.field(default_factory=list)
    findings: list[Finding] = msgspec.field(default_factory=list)
    agent: AgentOutcome | None = None


def draft_hash(draft: dict[str, Any]) -> str:
    return hashlib.sha256(_canonical.encode(draft)).hexdigest()[:32]


async def _provenance(conn: Connection, workspace_id: int) -> dict[str, str]:
    """name -> hash of the draft the newest import that touched it left."""
    cur = await conn.execute(_PROVENANCE, (workspace_id, PROVENANCE_IMPORTS))
    hashes: dict[str, str] = {}
    for row in await cur.fetchall():
        for name, value in (row["operations"] or {}).items():
            hashes.setdefault(name, value)
    return hashes


def _refusal(where: str, exc: ApiError) -> Skipped:
    reasons = "; ".join(f"{e.field}: {e.message}" if e.field else e.message for e in exc.errors)
    return Skipped(where=where, reason=f"not saved: {reasons or exc.message}")


def _invalid(spec: OperationSpec) -> Skipped | None:
    errors = validate_operation(spec)
    if not errors:
        return None
    return _refusal(spec.name, ValidationFailed(errors))


class _Importer:
    def __init__(
        self,
        conn: Connection,
        ws: Workspace,
        actor: str,
        report: ImportReport,
        *,
        validated: bool,
    ) -> None:
        self.conn, self.ws, self.actor, self.report = conn, ws, actor, report
        self.validated = validated  # the specs passed validate_operation already
        self.hashes: dict[str, str] = {}  # what the audit row records

    async def create(self, spec: OperationSpec, draft: dict[str, Any]) -> None:
        async def write() -> None:
            await operations.create_operation(self.conn, self.ws, self.actor, spec)

        await self._save(spec, draft, write, self.report.created)

    async def update(self, spec: OperationSpec, draft: dict[str, Any], row: dict[str, Any]) -> None:
        async def write() -> None:
            await operations.update_operation_draft(
                self.conn,
                self.ws,
                self.actor,
                spec.name,
                spec,
                Precondition(row["id"], row["revision"]),
            )

        await self._save(spec, draft, write, self.report.updated)

    async def _save(
        self,
        spec: OperationSpec,
        draft: dict[str, Any],
        write: Callable[[], Awaitable[None]],
        done: list[str],
    ) -> None:
        """``write`` (in a dry run, only validate ``spec``); then ``spec.name`` goes to
        ``done``, or to ``skipped`` with the reason it was refused."""
        if self.report.dry_run:
            refused = None if self.validated else _invalid(spec)
        else:
            try:
                await write()
                refused = None
            except ApiError as exc:
                refused = _refusal(spec.name, exc)
        if refused is not None:
            self.report.skipped.append(refused)
            return
        done.append(spec.name)
        self.hashes[spec.name] = draft_hash(draft)

    async def operation(
        self, spec: OperationSpec, row: dict[str, Any] | None, imported: dict[str, str]
    ) -> None:
        draft = spec_to_builtins(spec)
        if row is None:
            await self.create(spec, draft)
            return
        current = row["draft"]
        if current == draft:
            self.report.unchanged.append(spec.name)
            self.hashes[spec.name] = draft_hash(draft)
            return
        untouched = imported.get(spec.name) == draft_hash(current)
        if untouched or self.report.overwrite:
            await self.update(spec, draft, row)
            return
        changes = diff_values(current, draft)
        self.report.conflicts.append(
            ImportConflict(
                name=spec.name,
                reason="edited_since_import" if spec.name in imported else "not_imported",
                changes=changes[:MAX_CHANGES_SHOWN],
                more_changes=max(0, len(changes) - MAX_CHANGES_SHOWN),
            )
        )

    async def agent(self, spec: AgentSpec, present: list[str]) -> AgentOutcome:
        """Bind the imported operations; the agent's title, description and other
        bindings stay as they are when it exists."""
        row = await agents.get_agent(self.conn, self.ws.id, spec.slug)
        if row is None:
            spec = msgspec.structs.replace(spec, operations=present)
            if not self.report.dry_run:
                await agents.create_agent(self.conn, self.ws, self.actor, spec)
            return AgentOutcome(slug=spec.slug, action="create", added=present)
        current = msgspec.convert(row.draft, AgentSpec)
        added = [name for name in present if name not in current.operations]
        if not added:
            return AgentOutcome(slug=spec.slug, action="unchanged", added=[])
        updated = msgspec.structs.replace(current, operations=[*current.operations, *added])
        if not self.report.dry_run:
            await agents.update_agent_draft(
                self.conn,
                self.ws,
                self.actor,
                spec.slug,
                updated,
                Precondition(row.id, row.revision),
            )
        return AgentOutcome(slug=spec.slug, action="update", added=added)


async def import_openapi(
    conn: Connection,
    ws: Workspace,
    actor: str,
    result: ImportResult,
    *,
    source: str,
    dry_run: bool,
    overwrite: bool,
    validated: bool = False,
) -> ImportReport:
    """Write ``result`` into ``ws``'s drafts (nothing with ``dry_run``) and report.

    ``validated``: every spec in ``result`` passed ``validate_operation``
    already (``import_document(..., validate=True)``); otherwise each one is
    validated once here or by the operations service, and one that fails is
    reported as skipped. The caller commits.
    """
    if result.agent is not None:
        errors = validate_agent(result.agent)
        if errors:
            raise ValidationFailed([FieldError(f"agent.{e.field}", e.message) for e in errors])
    report = ImportReport(
        workspace=ws.slug,
        dry_run=dry_run,
        overwrite=overwrite,
        source=result.info,
        skipped=list(result.skipped),
        notes=list(result.notes),
        secrets=list(result.secrets),
    )
    await conn.execute(_LOCK_WORKSPACE, (f"crank.apply:{ws.id}",))
    names = [spec.name for spec in result.operations]
    cur = await conn.execute(_LOCK_OPERATIONS, (ws.id, names))
    existing = {row["name"]: row for row in await cur.fetchall()}
    imported = await _provenance(conn, ws.id)
    importer = _Importer(conn, ws, actor, report, validated=validated)
    for spec in result.operations:
        await importer.operation(spec, existing.get(spec.name), imported)

    refused = {s.where for s in report.skipped}  # by name, when the write refused the spec
    kept = [spec for spec in result.operations if spec.name not in refused]
    for spec in kept:
        report.findings += lint_operation(spec)  # the linter's view of what was imported
    if result.agent is not None:
        present = [s.name for s in kept if s.name in existing or s.name in report.created]
        report.agent = await importer.agent(result.agent, present)
        bound = {spec.name: spec for spec in kept}
        report.findings += lint_agent(
            msgspec.structs.replace(result.agent, operations=present), bound
        )
    if not dry_run:
        await record_change(
            conn,
            ws,
            actor,
            "openapi.import",
            ws.slug,
            {
                "source": source,
                "title": result.info.title,
                "version": result.info.version,
                "created": len(report.created),
                "updated": len(report.updated),
                "unchanged": len(report.unchanged),
                "conflicts": len(report.conflicts),
                "skipped": len(report.skipped),
                "overwrite": overwrite,
                "agent": report.agent.slug if report.agent else None,
                "operations": importer.hashes,
            },
            resource_type="workspace",
        )
    return report
