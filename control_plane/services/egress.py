"""A workspace's egress policy (docs/architecture.md, "Egress per workspace").

Two lists on the workspace's row, one revision (the ETag) for both:

- ``hosts``, set by the workspace's owner: the only hosts its operations may
  call (``None``: any). It can only narrow what the operator allows.
- ``grants``, set by instance admins only: the private destinations inside the
  operator's ``CRANK_UPSTREAM_ALLOWLIST`` this workspace may reach. An owner
  cannot grant them, so one tenant cannot open a host the operator allowlisted
  for another.

Every change is audited and bumps the catalog, so gateways apply it within a
refresh; an unchanged write changes nothing (no revision, audit row or bump).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import msgspec

from control_plane.auth import Workspace
from control_plane.errors import ValidationFailed
from control_plane.etag import Precondition, check_revision, etag
from control_plane.services.audit import record_change
from shared.db import Connection
from shared.engine.egress import MAX_EGRESS_ENTRIES, parse_grant, parse_host_pattern
from shared.engine.spec_validation import FieldError

HOSTS_ACTION: Final = "egress.set_hosts"
GRANTS_ACTION: Final = "egress.set_grants"
_COLUMNS: Final = "egress_hosts, egress_grants, egress_revision"


class EgressView(msgspec.Struct, kw_only=True):
    """The policy as the API shows it; the operator's global settings are not shown."""

    hosts: list[str] | None  # None: any host
    grants: list[str]
    revision: int


@dataclass(frozen=True, slots=True)
class EgressRow:
    workspace_id: int
    hosts: list[str] | None
    grants: list[str]
    revision: int

    @classmethod
    def from_row(cls, workspace_id: int, row: dict[str, Any]) -> EgressRow:
        hosts = row["egress_hosts"]
        return cls(
            workspace_id,
            None if hosts is None else list(hosts),
            list(row["egress_grants"]),
            row["egress_revision"],
        )

    @property
    def view(self) -> EgressView:
        return EgressView(hosts=self.hosts, grants=self.grants, revision=self.revision)

    @property
    def etag(self) -> str:
        return etag(self.workspace_id, self.revision)


def _entries(field: str, raw: Sequence[str], canonical: Callable[[str], str]) -> list[str]:
    """``raw`` in canonical spelling, duplicates dropped; ValidationFailed names each bad entry."""
    if len(raw) > MAX_EGRESS_ENTRIES:
        raise ValidationFailed([FieldError(field, f"at most {MAX_EGRESS_ENTRIES} entries")])
    errors: list[FieldError] = []
    entries: list[str] = []
    for index, entry in enumerate(raw):
        try:
            entries.append(canonical(entry))
        except ValueError as exc:
            errors.append(FieldError(f"{field}[{index}]", str(exc)))
    if errors:
        raise ValidationFailed(errors)
    return list(dict.fromkeys(entries))


def valid_hosts(hosts: Sequence[str] | None) -> list[str] | None:
    """Host patterns, lower-cased (``*.example.com``, IP addresses compressed)."""
    if hosts is None:
        return None
    return _entries("hosts", hosts, lambda raw: str(parse_host_pattern(raw)))


def valid_grants(grants: Sequence[str]) -> list[str]:
    """Allowlist entries, as written (surrounding spaces dropped)."""

    def canonical(raw: str) -> str:
        parse_grant(raw)
        return raw.strip()

    return _entries("grants", grants, canonical)


async def read_egress(conn: Connection, ws: Workspace) -> EgressRow:
    cur = await conn.execute(f"SELECT {_COLUMNS} FROM workspaces WHERE id = %s", (ws.id,))
    row = await cur.fetchone()
    assert row is not None  # load_workspace just found it, in this transaction
    return EgressRow.from_row(ws.id, row)


async def _write(
    conn: Connection,
    ws: Workspace,
    actor: str,
    expected: Precondition,
    change: tuple[str, list[str] | None, str],
) -> EgressRow:
    """Set one list (``change``: column, value, audit action) under ``If-Match``."""
    column, value, action = change
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM workspaces WHERE id = %s FOR UPDATE", (ws.id,)
    )
    row = await cur.fetchone()
    assert row is not None
    current = EgressRow.from_row(ws.id, row)
    check_revision(expected, ws.id, current.revision, f"the egress policy of {ws.slug!r}")
    before = row[column] if row[column] is None else list(row[column])
    if before == value:
        return current
    cur = await conn.execute(
        f"""UPDATE workspaces SET {column} = %s, egress_revision = egress_revision + 1
             WHERE id = %s RETURNING {_COLUMNS}""",
        (value, ws.id),
    )
    updated = await cur.fetchone()
    assert updated is not None
    details = {"before": before, "after": value, "revision": updated["egress_revision"]}
    await record_change(
        conn, ws, actor, action, ws.slug, details, resource_type="egress", notify_gateways=True
    )
    return EgressRow.from_row(ws.id, updated)


async def set_hosts(
    conn: Connection, ws: Workspace, actor: str, hosts: Sequence[str] | None, expected: Precondition
) -> EgressRow:
    """Replace the host list (``None``: any host); the owner's call."""
    change = ("egress_hosts", valid_hosts(hosts), HOSTS_ACTION)
    return await _write(conn, ws, actor, expected, change)


async def set_grants(
    conn: Connection, ws: Workspace, actor: str, grants: Sequence[str], expected: Precondition
) -> EgressRow:
    """Replace the private grants; an instance admin's call."""
    change = ("egress_grants", valid_grants(grants), GRANTS_ACTION)
    return await _write(conn, ws, actor, expected, change)


async def grant_once(conn: Connection, ws: Workspace, actor: str, entry: str) -> bool:
    """Add one grant unless the workspace has it (``crank seed-demo``); True if added."""
    current = await read_egress(conn, ws)
    (wanted,) = valid_grants([entry])
    if wanted in current.grants:
        return False
    await set_grants(
        conn, ws, actor, [*current.grants, wanted], Precondition(ws.id, current.revision)
    )
    return True
