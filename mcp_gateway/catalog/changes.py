"""What a snapshot reload reads: digests of every part of the catalog, then only
the rows whose digest changed (docs/architecture.md, "Snapshot and refresh").

The database hashes each part, grouped so that a change touches one group:
the published operations (id, workspace, name, latest version) by buckets
of 64 consecutive ids (``bucket``), an agent's row with its workspace's slug and egress policy, an agent's live
keys, a workspace's secrets, a workspace's identity providers. The operations, the largest part, are summed
rather than hashed in order (a scan of 10,000 rows, no sort): versions only
grow and ids are never reused, so a publish, a new or a deleted operation
always changes the count or the sum of its bucket, and a publish re-reads
64 rows at most. The gateway compares the hashes with those of
its last snapshot and fetches the rows of the groups that differ. A key
created anywhere therefore costs one agent's keys, not the catalog, and no
table needs a change log: polling alone finds the same differences as LISTEN.

Everything is read in one repeatable-read transaction, so the parts agree.
Rows are converted in slices (``Slicer``) so that a large read (the first
load, a mass publish) shares the event loop with the requests it serves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from shared.db import Connection
from shared.workspace_egress import EGRESS_COLUMNS

# One slice of conversion or compilation runs at most this long before the
# loop gets a turn (a request then waits at most about this much).
SLICE_S = 0.002
_FETCH_ROWS = 200

_DIGESTS_SQL = """
SELECT 'operations' AS part, id >> 6 AS id,
       convert_to(count(*) || ':' || sum(id * 1000003 + latest_version) || ':'
                  || sum(hashtextextended(workspace_id || ':' || name, 0)), 'UTF8') AS digest
  FROM operations WHERE latest_version IS NOT NULL GROUP BY id >> 6
UNION ALL
SELECT 'agent', a.id,
       sha256(convert_to(row(a.workspace_id, w.slug, a.slug, a.published,
                             w.egress_hosts, w.egress_grants)::text, 'UTF8'))
  FROM agents a JOIN workspaces w ON w.id = a.workspace_id
UNION ALL
SELECT 'keys', agent_id,
       sha256(convert_to(string_agg(id || ':' || kind || ':' || encode(hash, 'hex') || ':'
                                    || coalesce(expires_at::text, ''), ',' ORDER BY id), 'UTF8'))
  FROM api_keys
 WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())
 GROUP BY agent_id
UNION ALL
SELECT 'secrets', workspace_id,
       sha256(convert_to(string_agg(name || ':' || key_id || ':' || encode(nonce, 'hex') || ':'
                                    || encode(sha256(ciphertext), 'hex'), ',' ORDER BY name),
                         'UTF8'))
  FROM secrets
 WHERE workspace_id IN (SELECT workspace_id FROM agents WHERE published IS NOT NULL)
 GROUP BY workspace_id
UNION ALL
SELECT 'identity', workspace_id,
       sha256(convert_to(string_agg(row(id, name, issuer, algorithms, token_types, subject_claim,
                                        groups_claim, leeway_s, introspection_client_id,
                                        introspection_secret)::text, ',' ORDER BY id), 'UTF8'))
  FROM identity_providers
 GROUP BY workspace_id"""

_OPERATIONS_SQL = """SELECT o.id, o.workspace_id, o.name, o.latest_version
                       FROM unnest(%s::bigint[]) AS b(bucket)
                       JOIN operations o ON o.id >= b.bucket << 6 AND o.id < (b.bucket + 1) << 6
                      WHERE o.latest_version IS NOT NULL"""
_SPECS_SQL = """SELECT v.operation_id, v.version, v.spec::text AS spec
                  FROM unnest(%s::bigint[], %s::integer[]) AS want(id, version)
                  JOIN operation_versions v ON v.operation_id = want.id AND v.version = want.version"""
_AGENTS_SQL = f"""SELECT a.id, a.workspace_id, w.slug AS workspace, a.slug, a.published,
                         {EGRESS_COLUMNS}
                    FROM agents a JOIN workspaces w ON w.id = a.workspace_id
                   WHERE a.id = ANY(%s)"""
_KEYS_SQL = """SELECT id, hash, kind, agent_id, expires_at FROM api_keys
                WHERE agent_id = ANY(%s) AND revoked_at IS NULL
                  AND (expires_at IS NULL OR expires_at > now())"""
_SECRETS_SQL = """SELECT workspace_id, name, ciphertext, nonce, key_id FROM secrets
                   WHERE workspace_id = ANY(%s)"""
_IDENTITY_SQL = """SELECT workspace_id, name, issuer, algorithms, token_types, subject_claim,
                          groups_claim, leeway_s, introspection_client_id, introspection_secret
                     FROM identity_providers WHERE workspace_id = ANY(%s) ORDER BY id"""


class Slicer:
    """Gives the event loop a turn whenever ``SLICE_S`` of work has run since the last."""

    def __init__(self) -> None:
        self._since = time.perf_counter()

    async def tick(self) -> None:
        if time.perf_counter() - self._since >= SLICE_S:
            await asyncio.sleep(0)
            self._since = time.perf_counter()


@dataclass(frozen=True, slots=True)
class Digests:
    """Per group, the database's hash of it; a group that is gone has no entry."""

    operations: dict[int, bytes] = field(default_factory=dict)  # bucket of ids ->
    agents: dict[int, bytes] = field(default_factory=dict)  # agent id ->
    keys: dict[int, bytes] = field(default_factory=dict)  # agent id -> its live keys
    secrets: dict[int, bytes] = field(default_factory=dict)  # workspace id ->
    identity: dict[int, bytes] = field(default_factory=dict)  # workspace id -> its providers


def changed(old: dict[int, bytes], new: dict[int, bytes]) -> set[int]:
    """Groups added, removed or different."""
    return {k for k in old.keys() | new.keys() if old.get(k) != new.get(k)}


async def read_digests(conn: Connection) -> Digests:
    digests = Digests()
    parts = {
        "operations": digests.operations,
        "agent": digests.agents,
        "keys": digests.keys,
        "secrets": digests.secrets,
        "identity": digests.identity,
    }
    cur = await conn.execute(_DIGESTS_SQL)
    for row in await cur.fetchall():
        parts[row["part"]][row["id"]] = bytes(row["digest"])
    return digests


async def _rows(conn: Connection, sql: str, params: tuple[Any, ...], slicer: Slicer) -> list[Any]:
    """All rows of ``sql``, converted a slice at a time."""
    rows: list[Any] = []
    cur = conn.cursor()
    await cur.execute(sql, params)
    while batch := await cur.fetchmany(_FETCH_ROWS):
        rows.extend(batch)
        await slicer.tick()
    return rows


def bucket(operation_id: int) -> int:
    """The group of an operation in ``Digests.operations``."""
    return operation_id >> 6


async def read_operations(
    conn: Connection, buckets: Collection[int], slicer: Slicer
) -> list[dict[str, Any]]:
    """The published operations (id, workspace_id, name, latest_version) of ``buckets``."""
    if not buckets:
        return []
    return await _rows(conn, _OPERATIONS_SQL, (list(buckets),), slicer)


async def read_specs(
    conn: Connection, wanted: Collection[tuple[int, int]], slicer: Slicer
) -> list[dict[str, Any]]:
    """Rows (operation_id, version, spec as JSON text) of the ``(operation id, version)`` asked."""
    if not wanted:
        return []
    ids, versions = [w[0] for w in wanted], [w[1] for w in wanted]
    return await _rows(conn, _SPECS_SQL, (ids, versions), slicer)


async def read_agents(conn: Connection, ids: Collection[int]) -> list[dict[str, Any]]:
    if not ids:
        return []
    cur = await conn.execute(_AGENTS_SQL, (list(ids),))
    return await cur.fetchall()


async def read_keys(conn: Connection, agents: Collection[int], slicer: Slicer) -> list[Any]:
    if not agents:
        return []
    return await _rows(conn, _KEYS_SQL, (list(agents),), slicer)


async def read_secrets(conn: Connection, workspaces: Collection[int]) -> list[dict[str, Any]]:
    if not workspaces:
        return []
    cur = await conn.execute(_SECRETS_SQL, (list(workspaces),))
    return await cur.fetchall()


async def read_identity(conn: Connection, workspaces: Collection[int]) -> list[dict[str, Any]]:
    """The identity providers of ``workspaces``, in the order they were made."""
    if not workspaces:
        return []
    cur = await conn.execute(_IDENTITY_SQL, (list(workspaces),))
    return await cur.fetchall()
