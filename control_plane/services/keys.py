"""API keys of agents: ``agent`` keys for the MCP endpoint, ``approval`` keys for
the approvals endpoints.

A key is shown once, when it is created; the database holds only its HMAC
(``KeyHasher``) and a display prefix. Creating and revoking a key bump the
catalog so every gateway learns of it at once; the audit log records the
prefix, never the key.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
from psycopg import errors as pg_errors

from control_plane.auth import Workspace
from control_plane.errors import Conflict, NotFound, ValidationFailed
from control_plane.services.audit import record_change
from control_plane.services.constraints import refuse_check_violations
from shared.crypto import KeyHasher
from shared.db import Connection
from shared.engine.spec_validation import FieldError
from shared.keys import KeyKind, display_prefix, generate_key, parse_key

API_KEY_KINDS = (KeyKind.AGENT.value, KeyKind.APPROVAL.value)

_SELECT = """SELECT k.id, k.prefix, k.kind, a.slug AS agent, k.name, k.created_at, k.created_by,
                    k.expires_at, k.revoked_at, k.last_used_at
               FROM api_keys k JOIN agents a ON a.id = k.agent_id"""


class KeyView(msgspec.Struct, kw_only=True):
    """A key as listings show it: never the key, never its hash."""

    id: int
    prefix: str
    kind: str
    agent: str
    name: str
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    last_used_at: datetime | None


class IssuedKey(KeyView, kw_only=True):
    """A key just created; ``key`` is the only copy there will ever be."""

    key: str


def _view(row: dict[str, Any]) -> KeyView:
    return KeyView(**row)


async def list_api_keys(
    conn: Connection, workspace_id: int, agent: str | None = None
) -> list[KeyView]:
    """Every key of the workspace (revoked and expired ones too), oldest first."""
    cur = await conn.execute(
        f"""{_SELECT} WHERE k.workspace_id = %(ws)s
              AND (%(agent)s::text IS NULL OR a.slug = %(agent)s)
            ORDER BY k.id""",
        {"ws": workspace_id, "agent": agent},
    )
    return [_view(row) for row in await cur.fetchall()]


async def create_api_key(
    conn: Connection,
    hasher: KeyHasher,
    ws: Workspace,
    actor: str,
    *,
    agent: str,
    kind: str = "agent",
    name: str = "",
    expires_at: datetime | None = None,
    key: str | None = None,
) -> IssuedKey:
    """Issue a key for ``agent``. ``key=None`` generates one; a given key (of the
    right kind, checksum intact) lets ``crank up`` re-register a saved dev key,
    and is refused with ``already_exists`` when it is registered already."""
    errors: list[FieldError] = []
    if kind not in API_KEY_KINDS:
        errors.append(FieldError("kind", f"must be one of {', '.join(API_KEY_KINDS)}"))
    if expires_at is not None:
        if expires_at.tzinfo is None:
            errors.append(FieldError("expires_at", "needs a timezone offset, e.g. ...Z"))
        elif expires_at <= datetime.now(UTC):
            errors.append(FieldError("expires_at", "must be in the future"))
    if key is not None and (kind not in API_KEY_KINDS or parse_key(key) != KeyKind(kind)):
        errors.append(FieldError("key", f"not a well-formed crk_{kind}_ key"))
    cur = await conn.execute(
        "SELECT id FROM agents WHERE workspace_id = %s AND slug = %s", (ws.id, agent)
    )
    agent_row = await cur.fetchone()
    if agent_row is None:
        errors.append(FieldError("agent", f"no agent {agent!r} in workspace {ws.slug!r}"))
    if errors:
        raise ValidationFailed(errors)
    assert agent_row is not None

    key = key or generate_key(KeyKind(kind))
    prefix = display_prefix(key)
    try:
        with refuse_check_violations():
            async with conn.transaction():
                cur = await conn.execute(
                    """INSERT INTO api_keys
                           (workspace_id, agent_id, kind, prefix, hash, name, created_by, expires_at)
                       VALUES (%s, %s, %s, %s, %s, %s, %s, %s)
                       RETURNING id, created_at""",
                    (
                        ws.id,
                        agent_row["id"],
                        kind,
                        prefix,
                        hasher.hash(key),
                        name,
                        actor,
                        expires_at,
                    ),
                )
                row = await cur.fetchone()
    except pg_errors.UniqueViolation:
        raise Conflict(f"key {prefix}... is registered already", code="already_exists") from None
    except pg_errors.ForeignKeyViolation:  # the agent was deleted meanwhile
        raise ValidationFailed(
            [FieldError("agent", f"no agent {agent!r} in workspace {ws.slug!r}")]
        ) from None
    assert row is not None
    await record_change(
        conn,
        ws,
        actor,
        "key.create",
        prefix,
        {"prefix": prefix, "kind": kind, "agent": agent, "name": name},
        resource_type="api_key",
        notify_gateways=True,
    )
    return IssuedKey(
        id=row["id"],
        key=key,
        prefix=prefix,
        kind=kind,
        agent=agent,
        name=name,
        created_at=row["created_at"],
        created_by=actor,
        expires_at=expires_at,
        revoked_at=None,
        last_used_at=None,
    )


async def revoke_api_key(conn: Connection, ws: Workspace, actor: str, key_id: int) -> KeyView:
    """Revoke a key at once, on every gateway.

    Revoking an already revoked key succeeds and changes nothing (its original
    ``revoked_at`` stays; no catalog bump, no audit row), so a retried revoke is
    safe. A key id of another workspace is 404.
    """
    cur = await conn.execute(
        f"{_SELECT} WHERE k.id = %s AND k.workspace_id = %s FOR UPDATE OF k", (key_id, ws.id)
    )
    row = await cur.fetchone()
    if row is None:
        raise NotFound(f"key {key_id} not found in workspace {ws.slug!r}")
    if row["revoked_at"] is not None:
        return _view(row)
    cur = await conn.execute(
        "UPDATE api_keys SET revoked_at = now() WHERE id = %s RETURNING revoked_at", (key_id,)
    )
    revoked = await cur.fetchone()
    assert revoked is not None
    await record_change(
        conn,
        ws,
        actor,
        "key.revoke",
        row["prefix"],
        {"prefix": row["prefix"], "kind": row["kind"], "agent": row["agent"]},
        resource_type="api_key",
        notify_gateways=True,
    )
    return _view({**row, "revoked_at": revoked["revoked_at"]})
