"""The dev admin token and demo keys of ``crank up``: the saved ones, registered if needed.

A saved token or key is re-registered as it is (same secret, so what the
user pasted last time keeps working, even against a fresh database). One that
was revoked or has expired is replaced by a new one, which the caller saves.
"""

from __future__ import annotations

from psycopg import errors as pg_errors

from control_plane.auth import Workspace
from control_plane.services.keys import create_api_key
from control_plane.services.tokens import create_admin_token, token_is_valid
from shared.crypto import KeyHasher
from shared.db import Connection
from shared.keys import KeyKind, parse_key

DEV_ADMIN_NAME = "crank up (dev admin)"
# (agent slug, key kind) of the demo keys `crank up` hands out.
DEMO_KEYS: tuple[tuple[str, str], ...] = (
    ("currency-rates", "agent"),
    ("sales", "agent"),
    ("sales", "approval"),
)


async def ensure_admin_token(conn: Connection, hasher: KeyHasher, saved: str) -> str:
    """A working instance-admin token: ``saved`` when possible."""
    if await token_is_valid(conn, hasher, saved):
        return saved
    if parse_key(saved) is KeyKind.ADMIN:
        try:
            async with conn.transaction():
                issued = await create_admin_token(
                    conn, hasher, name=DEV_ADMIN_NAME, role="admin", token=saved
                )
            return issued.token
        except pg_errors.UniqueViolation:
            pass  # registered but revoked or expired: issue a new one
    issued = await create_admin_token(conn, hasher, name=DEV_ADMIN_NAME, role="admin")
    return issued.token


async def _saved_key_state(conn: Connection, hasher: KeyHasher, key: str) -> str:
    """``usable``, ``unusable`` (revoked or expired) or ``unknown`` under the current secret."""
    # By hash, not display prefix: after a CRANK_SECRET_KEY change the same key is
    # unknown again and must be registered anew.
    cur = await conn.execute(
        """SELECT revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now()) AS usable
             FROM api_keys WHERE hash = %s""",
        (hasher.hash(key),),
    )
    row = await cur.fetchone()
    if row is None:
        return "unknown"
    return "usable" if row["usable"] else "unusable"


async def ensure_api_key(
    conn: Connection,
    hasher: KeyHasher,
    ws: Workspace,
    actor: str,
    *,
    agent: str,
    kind: str,
    saved: str | None,
) -> str:
    """A usable key of ``kind`` for ``agent``: ``saved`` when possible."""
    if saved is not None and parse_key(saved) == KeyKind(kind):
        state = await _saved_key_state(conn, hasher, saved)
        if state == "usable":
            return saved
        if state == "unknown":
            issued = await create_api_key(
                conn, hasher, ws, actor, agent=agent, kind=kind, name="demo", key=saved
            )
            return issued.key
    issued = await create_api_key(conn, hasher, ws, actor, agent=agent, kind=kind, name="demo")
    return issued.key
