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
from control_plane.errors import NotFound, ValidationFailed
from control_plane.services.audit import record_change
from control_plane.services.constraints import refuse_check_violations
from shared.crypto import SecretBox, secret_associated_data
from shared.db import Connection
from shared.engine.spec_validation import SECRET_NAME, FieldError
from shared.secrets import open_secret

MAX_SECRET_BYTES = 64 * 1024


class SecretView(msgspec.Struct, kw_only=True):
    """A secret as the API shows it: the name and times, never the value."""

    name: str
    created_at: datetime
    updated_at: datetime


class StoredSecret(msgspec.Struct, kw_only=True, frozen=True):
    view: SecretView
    created: bool  # False: an existing secret was replaced (or already held the value)
    changed: bool  # False: it already held this value, sealed with the current key


def _check(name: str, value: str) -> None:
    errors: list[FieldError] = []
    if not SECRET_NAME.fullmatch(name):
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


async def _unchanged(
    conn: Connection, box: SecretBox, ws: Workspace, name: str, value: str
) -> SecretView | None:
    """The stored secret if it already holds ``value`` under the current key.

    Locks the row, so the answer holds until the transaction ends. A value
    sealed with a previous key counts as changed: storing it again re-seals it
    with the current one, which is how an operator finishes a key rotation.
    """
    cur = await conn.execute(
        """SELECT name, created_at, updated_at, ciphertext, nonce, key_id FROM secrets
            WHERE workspace_id = %s AND name = %s FOR UPDATE""",
        (ws.id, name),
    )
    row = await cur.fetchone()
    if row is None or row["key_id"] != box.current_key_id:
        return None
    if open_secret(row, box, ws.id) != value:
        return None
    return SecretView(name=row["name"], created_at=row["created_at"], updated_at=row["updated_at"])


async def set_secret(
    conn: Connection, box: SecretBox, ws: Workspace, actor: str, name: str, value: str
) -> StoredSecret:
    """Create or replace a secret in one upsert. Storing the value a secret
    already holds changes nothing: no write, no catalog bump, no audit row."""
    _check(name, value)
    unchanged = await _unchanged(conn, box, ws, name, value)
    if unchanged is not None:
        return StoredSecret(view=unchanged, created=False, changed=False)
    sealed = box.seal(value, secret_associated_data(ws.id, name))
    with refuse_check_violations():
        cur = await conn.execute(
            """INSERT INTO secrets (workspace_id, name, ciphertext, nonce, key_id)
               VALUES (%(ws)s, %(name)s, %(ciphertext)s, %(nonce)s, %(key_id)s)
               ON CONFLICT (workspace_id, name) DO UPDATE
                  SET ciphertext = excluded.ciphertext, nonce = excluded.nonce,
                      key_id = excluded.key_id, updated_at = now()
               RETURNING (xmax = 0) AS created, name, created_at, updated_at""",
            {
                "ws": ws.id,
                "name": name,
                "ciphertext": sealed.ciphertext,
                "nonce": sealed.nonce,
                "key_id": sealed.key_id,
            },
        )
    row = await cur.fetchone()
    assert row is not None
    created = bool(row.pop("created"))
    await record_change(
        conn,
        ws,
        actor,
        "secret.create" if created else "secret.update",
        name,
        {"key_id": sealed.key_id},
        notify_gateways=True,
    )
    return StoredSecret(view=SecretView(**row), created=created, changed=True)


async def delete_secret(conn: Connection, ws: Workspace, actor: str, name: str) -> None:
    """Deletes and audits it and bumps the catalog; raises NotFound (404)."""
    cur = await conn.execute(
        "DELETE FROM secrets WHERE workspace_id = %s AND name = %s RETURNING id", (ws.id, name)
    )
    if await cur.fetchone() is None:
        raise NotFound(f"secret {name!r} not found in workspace {ws.slug!r}")
    await record_change(conn, ws, actor, "secret.delete", name, notify_gateways=True)
