"""Workspace secrets: upstream credentials that operations name in ``request.auth``.

Values are sealed with AES-256-GCM (``SecretBox``), the associated data binding
each ciphertext to its workspace and name, so a row copied elsewhere does not
decrypt. Nothing here returns a value, and the audit log never sees one. A
change bumps the catalog: gateways hold the opened values in their snapshot.
"""

from __future__ import annotations

from datetime import datetime

import msgspec

from control_plane.auth import Workspace
from control_plane.errors import Conflict, NotFound, ValidationFailed
from control_plane.services.audit import record
from control_plane.services.catalog import bump_catalog
from shared.crypto import SecretBox, secret_associated_data
from shared.db import Connection
from shared.spec_validation import SECRET_NAME, FieldError

MAX_SECRET_BYTES = 64 * 1024
_UPSERT_ATTEMPTS = 3


class SecretView(msgspec.Struct, kw_only=True):
    name: str
    created_at: datetime
    updated_at: datetime


def _check(name: str, value: str) -> None:
    errors: list[FieldError] = []
    if not SECRET_NAME.match(name):
        errors.append(FieldError("name", "1-128 characters of letters, digits, _, . and -"))
    if not value:
        errors.append(FieldError("value", "a secret value cannot be empty"))
    elif len(value.encode()) > MAX_SECRET_BYTES:
        errors.append(FieldError("value", f"at most {MAX_SECRET_BYTES} bytes"))
    if errors:
        raise ValidationFailed(errors)


async def list_secrets(conn: Connection, workspace_id: int) -> list[SecretView]:
    cur = await conn.execute(
        "SELECT name, created_at, updated_at FROM secrets WHERE workspace_id = %s ORDER BY name",
        (workspace_id,),
    )
    return [SecretView(**row) for row in await cur.fetchall()]


async def get_secret_view(conn: Connection, workspace_id: int, name: str) -> SecretView | None:
    cur = await conn.execute(
        "SELECT name, created_at, updated_at FROM secrets WHERE workspace_id = %s AND name = %s",
        (workspace_id, name),
    )
    row = await cur.fetchone()
    return SecretView(**row) if row else None


async def set_secret(
    conn: Connection, box: SecretBox, ws: Workspace, actor: str, name: str, value: str
) -> bool:
    """Create or replace a secret; True when it was created."""
    _check(name, value)
    sealed = box.seal(value, secret_associated_data(ws.id, name))
    params = {
        "ws": ws.id,
        "name": name,
        "ciphertext": sealed.ciphertext,
        "nonce": sealed.nonce,
        "key_id": sealed.key_id,
    }
    created = False
    for _attempt in range(_UPSERT_ATTEMPTS):
        cur = await conn.execute(
            """UPDATE secrets SET ciphertext = %(ciphertext)s, nonce = %(nonce)s,
                      key_id = %(key_id)s, updated_at = now()
                WHERE workspace_id = %(ws)s AND name = %(name)s RETURNING id""",
            params,
        )
        if await cur.fetchone() is not None:
            break
        # Not there: insert. A concurrent insert of the same name makes this a
        # no-op, and the next UPDATE (a new statement, a new snapshot) finds it.
        cur = await conn.execute(
            """INSERT INTO secrets (workspace_id, name, ciphertext, nonce, key_id)
               VALUES (%(ws)s, %(name)s, %(ciphertext)s, %(nonce)s, %(key_id)s)
               ON CONFLICT (workspace_id, name) DO NOTHING RETURNING id""",
            params,
        )
        if await cur.fetchone() is not None:
            created = True
            break
    else:  # the row kept appearing and vanishing under concurrent writers
        raise Conflict(f"secret {name!r} is being changed concurrently; try again")
    await bump_catalog(conn)
    await record(
        conn,
        workspace_id=ws.id,
        actor=actor,
        action="secret.create" if created else "secret.update",
        resource_type="secret",
        resource_name=name,
        details={"key_id": sealed.key_id},
    )
    return created


async def delete_secret(conn: Connection, ws: Workspace, actor: str, name: str) -> None:
    cur = await conn.execute(
        "DELETE FROM secrets WHERE workspace_id = %s AND name = %s RETURNING id", (ws.id, name)
    )
    if await cur.fetchone() is None:
        raise NotFound(f"secret {name!r} not found in workspace {ws.slug!r}")
    await bump_catalog(conn)
    await record(
        conn,
        workspace_id=ws.id,
        actor=actor,
        action="secret.delete",
        resource_type="secret",
        resource_name=name,
    )
