"""Re-sealing every stored secret under the current ``CRANK_SECRET_KEY``
(docs/architecture.md, "Key rotation").

Two tables hold sealed values: ``secrets`` (bound to workspace and name) and
``webhook_subscriptions`` (bound to the subscription's id). Rows whose
``key_id`` is not the current key's are read in batches, in id order, each
batch in a transaction of its own, so no lock is held for long while
gateways keep serving. Each value is opened with the box (current and
previous keys) and sealed again with the same associated data; the update
is fenced on the row's old ciphertext and key id, so a value replaced in
the meantime wins and is never overwritten. A row no configured key opens
is reported (workspace and name, never a value) and left as it is. A batch
that changed a secret bumps the catalog, so gateways reload it. One audit
entry, ``secrets.rotate_key``, records the counts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import msgspec
from psycopg_pool import AsyncConnectionPool

from control_plane.services.audit import record
from control_plane.services.catalog import bump_catalog
from shared.crypto import CryptoError, Sealed, SecretBox, secret_associated_data
from shared.db import Connection
from shared.webhook_signing import subscription_associated_data

BATCH_SIZE = 500


class UnreadableValue(msgspec.Struct, kw_only=True, frozen=True):
    """A sealed value no configured key opens: where it is, never what it holds."""

    kind: str  # secret | webhook
    workspace: str
    name: str  # the secret's name, or the webhook subscription's id
    key_id: str


class RotationReport(msgspec.Struct, kw_only=True):
    rotated: int
    already_current: int
    unreadable: list[UnreadableValue]
    key_id: str


@dataclass(frozen=True, slots=True)
class SealedTable:
    """One table of sealed values and how a row's associated data and name are made."""

    kind: str
    table: str
    id_type: str
    name_column: str
    associated: Callable[[dict[str, Any]], bytes]


SECRETS = SealedTable(
    kind="secret",
    table="secrets",
    id_type="bigint",
    name_column="name",
    associated=lambda row: secret_associated_data(row["workspace_id"], row["name"]),
)
WEBHOOK_SECRETS = SealedTable(
    kind="webhook",
    table="webhook_subscriptions",
    id_type="text",
    name_column="id",
    associated=lambda row: subscription_associated_data(row["name"]),
)
TABLES = (SECRETS, WEBHOOK_SECRETS)


@dataclass(frozen=True, slots=True)
class Resealed:
    id: Any
    old_ciphertext: bytes
    old_key_id: str
    sealed: Sealed


@dataclass(slots=True)
class Batch:
    """What one batch read: the rows re-sealed, the ones no key opens, where to go on."""

    resealed: list[Resealed]
    unreadable: list[UnreadableValue]
    last_id: Any  # None: nothing was left to read


async def read_batch(
    conn: Connection,
    box: SecretBox,
    table: SealedTable,
    after: Any,
    limit: int = BATCH_SIZE,
) -> Batch:
    """The next ``limit`` rows of ``table`` (ids above ``after``) not sealed with the
    current key, each opened and sealed again; no row is locked."""
    cur = await conn.execute(
        f"""SELECT t.id, t.workspace_id, t.{table.name_column} AS name, t.ciphertext,
                   t.nonce, t.key_id, w.slug AS workspace
              FROM {table.table} t JOIN workspaces w ON w.id = t.workspace_id
             WHERE t.key_id <> %(current)s AND (%(after)s::{table.id_type} IS NULL
                   OR t.id > %(after)s::{table.id_type})
             ORDER BY t.id LIMIT %(limit)s""",
        {"current": box.current_key_id, "after": after, "limit": limit},
    )
    rows = await cur.fetchall()
    batch = Batch(resealed=[], unreadable=[], last_id=rows[-1]["id"] if rows else None)
    for row in rows:
        associated = table.associated(row)
        old = Sealed(bytes(row["ciphertext"]), bytes(row["nonce"]), row["key_id"])
        try:
            value = box.open(old, associated)
        except CryptoError:
            batch.unreadable.append(
                UnreadableValue(
                    kind=table.kind,
                    workspace=row["workspace"],
                    name=row["name"],
                    key_id=row["key_id"],
                )
            )
            continue
        batch.resealed.append(
            Resealed(row["id"], old.ciphertext, old.key_id, box.seal(value, associated))
        )
    return batch


async def write_batch(conn: Connection, table: SealedTable, resealed: list[Resealed]) -> int:
    """Store the re-sealed values in one statement, each fenced on the ciphertext and
    key id it was read with; how many rows were updated (a row replaced since is not)."""
    if not resealed:
        return 0
    cur = await conn.execute(
        f"""UPDATE {table.table} t
               SET ciphertext = r.ciphertext, nonce = r.nonce, key_id = r.key_id
              FROM unnest(%s::{table.id_type}[], %s::bytea[], %s::text[], %s::bytea[],
                          %s::bytea[], %s::text[])
                   AS r(id, old_ciphertext, old_key_id, ciphertext, nonce, key_id)
             WHERE t.id = r.id AND t.key_id = r.old_key_id AND t.ciphertext = r.old_ciphertext
         RETURNING t.id""",
        (
            [item.id for item in resealed],
            [item.old_ciphertext for item in resealed],
            [item.old_key_id for item in resealed],
            [item.sealed.ciphertext for item in resealed],
            [item.sealed.nonce for item in resealed],
            [item.sealed.key_id for item in resealed],
        ),
    )
    return len(await cur.fetchall())


async def _count_current(conn: Connection, key_id: str) -> int:
    cur = await conn.execute(
        """SELECT (SELECT count(*) FROM secrets WHERE key_id = %(k)s)
                + (SELECT count(*) FROM webhook_subscriptions WHERE key_id = %(k)s) AS n""",
        {"k": key_id},
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row["n"])


async def rotate_key(
    pool: AsyncConnectionPool[Connection],
    box: SecretBox,
    actor: str,
    *,
    batch_size: int = BATCH_SIZE,
) -> RotationReport:
    """Re-seal every value not sealed with the current key, batch by batch."""
    async with pool.connection() as conn:
        already_current = await _count_current(conn, box.current_key_id)
    rotated = 0
    unreadable: list[UnreadableValue] = []
    for table in TABLES:
        after: Any = None
        while True:
            async with pool.connection() as conn:  # one transaction per batch
                batch = await read_batch(conn, box, table, after, batch_size)
                if batch.last_id is None:
                    break
                written = await write_batch(conn, table, batch.resealed)
                if written:
                    await bump_catalog(conn)
            rotated += written
            unreadable.extend(batch.unreadable)
            after = batch.last_id
    report = RotationReport(
        rotated=rotated,
        already_current=already_current,
        unreadable=unreadable,
        key_id=box.current_key_id,
    )
    async with pool.connection() as conn:
        await record(
            conn,
            workspace_id=None,
            actor=actor,
            action="secrets.rotate_key",
            resource_type="secrets",
            details={
                "key_id": report.key_id,
                "rotated": report.rotated,
                "already_current": report.already_current,
                "unreadable": len(report.unreadable),
            },
        )
    return report
