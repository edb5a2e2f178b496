"""Admin users and their tokens; used by ``crank tokens create`` and ``crank up``."""

from __future__ import annotations

from dataclasses import dataclass

from control_plane.auth import Role
from control_plane.services.audit import record
from shared.crypto import KeyHasher
from shared.db import Connection
from shared.keys import KeyKind, display_prefix, generate_key


class UnknownWorkspace(LookupError):
    """The workspace a token's role was asked for does not exist."""

    pass


@dataclass(frozen=True, slots=True)
class IssuedToken:
    """A new admin token; ``token`` is shown once, only its hash is stored."""

    token: str
    prefix: str
    user_id: int


async def create_admin_token(
    conn: Connection,
    hasher: KeyHasher,
    *,
    name: str,
    role: str,
    workspace: str | None = None,
    token: str | None = None,
) -> IssuedToken:
    """Create a user holding ``role`` (``admin`` instance-wide, else in ``workspace``)
    and a token for it. ``token`` lets ``crank up`` re-register its saved dev token."""
    token = token or generate_key(KeyKind.ADMIN)
    is_admin = role == "admin"
    workspace_id: int | None = None
    if not is_admin:
        Role[role.upper()]  # raises KeyError for an unknown role
        if workspace is None:
            raise ValueError("a workspace role needs --workspace")
        cur = await conn.execute("SELECT id FROM workspaces WHERE slug = %s", (workspace,))
        row = await cur.fetchone()
        if row is None:
            raise UnknownWorkspace(workspace)
        workspace_id = row["id"]
    cur = await conn.execute(
        "INSERT INTO admin_users (name, is_instance_admin) VALUES (%s, %s) RETURNING id",
        (name, is_admin),
    )
    user = await cur.fetchone()
    assert user is not None
    if workspace_id is not None:
        await conn.execute(
            "INSERT INTO workspace_members (workspace_id, user_id, role) VALUES (%s, %s, %s)",
            (workspace_id, user["id"], role),
        )
    prefix = display_prefix(token)
    await conn.execute(
        "INSERT INTO admin_tokens (user_id, prefix, hash, name) VALUES (%s, %s, %s, %s)",
        (user["id"], prefix, hasher.hash(token), name),
    )
    await record(
        conn,
        workspace_id=workspace_id,
        actor="cli",
        action="token.create",
        resource_type="admin_token",
        resource_name=prefix,
        details={"role": role, "user": name},
    )
    return IssuedToken(token=token, prefix=prefix, user_id=user["id"])


async def token_is_valid(conn: Connection, hasher: KeyHasher, token: str) -> bool:
    """Whether ``token`` is a live admin token, hashed with the current or a previous key."""
    cur = await conn.execute(
        """SELECT 1 FROM admin_tokens WHERE hash = ANY(%s) AND revoked_at IS NULL
              AND (expires_at IS NULL OR expires_at > now())""",
        (hasher.candidates(token),),
    )
    return await cur.fetchone() is not None


@dataclass(frozen=True, slots=True)
class TokenListing:
    prefix: str
    name: str
    role: str  # "admin" or "<role>@<workspace>", comma-separated when several
    created_at: str
    last_used_at: str | None
    revoked: bool


async def list_admin_tokens(conn: Connection) -> list[TokenListing]:
    """Every admin token with its role (``admin`` or ``role@workspace``); no token or hash."""
    cur = await conn.execute(
        """SELECT t.prefix, t.name, t.created_at, t.last_used_at, t.revoked_at IS NOT NULL AS revoked,
                  CASE WHEN u.is_instance_admin THEN 'admin' ELSE coalesce(
                      (SELECT string_agg(m.role || '@' || w.slug, ',' ORDER BY w.slug)
                         FROM workspace_members m JOIN workspaces w ON w.id = m.workspace_id
                        WHERE m.user_id = u.id), '') END AS role
             FROM admin_tokens t JOIN admin_users u ON u.id = t.user_id
            ORDER BY t.id"""
    )
    return [
        TokenListing(
            prefix=row["prefix"],
            name=row["name"],
            role=row["role"],
            created_at=row["created_at"].isoformat(timespec="seconds"),
            last_used_at=row["last_used_at"] and row["last_used_at"].isoformat(timespec="seconds"),
            revoked=row["revoked"],
        )
        for row in await cur.fetchall()
    ]


async def revoke_admin_token(conn: Connection, prefix: str) -> int:
    """Revoke the tokens listed under ``prefix``; how many were still active."""
    cur = await conn.execute(
        "UPDATE admin_tokens SET revoked_at = now() WHERE prefix = %s AND revoked_at IS NULL "
        "RETURNING id",
        (prefix,),
    )
    revoked = len(await cur.fetchall())
    if revoked:
        await record(
            conn,
            workspace_id=None,
            actor="cli",
            action="token.revoke",
            resource_type="admin_token",
            resource_name=prefix,
        )
    return revoked
