"""Admin authentication (bearer tokens) and workspace authorization (roles).

Roles: instance admin > owner > editor > viewer. A workspace the caller has
no role in answers 404, exactly like one that does not exist, so tokens
cannot probe other tenants' workspace names.

Each token checked costs a query, and well-formed wrong tokens are free to
make: failed attempts are bounded per client address
(``CRANK_ADMIN_TOKEN_FAILURE_LIMIT``, docs/architecture.md, "Request
admission"). Past the limit a client gets 429 with ``Retry-After`` before
any query, whatever token it sends.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from litestar import Request

from control_plane.errors import Forbidden, NotFound, TooManyAttempts, Unauthorized
from control_plane.state import AppState
from shared.db import Connection
from shared.keys import KeyKind, parse_key
from shared.token_bucket import retry_after_s


class Role(IntEnum):
    """A role in one workspace; ordered, so ``role >= need`` means "may do it".
    ``INSTANCE_ADMIN`` is no membership: instance admins hold it in every workspace,
    and the few workspace routes only they may call declare it."""

    VIEWER = 1
    EDITOR = 2
    OWNER = 3
    INSTANCE_ADMIN = 4

    @property
    def label(self) -> str:
        return self.name.lower().replace("_", " ")


@dataclass(frozen=True, slots=True)
class Principal:
    """The caller behind an admin token; an instance admin outranks the owner of every workspace."""

    user_id: int
    name: str
    token_id: int
    token_prefix: str
    is_instance_admin: bool
    roles: dict[int, Role] = field(default_factory=dict)  # workspace id -> role

    @property
    def actor(self) -> str:
        """How audit records name this caller: never the token itself."""
        return f"{self.name} ({self.token_prefix})"

    def role_in(self, workspace_id: int) -> Role | None:
        if self.is_instance_admin:
            return Role.INSTANCE_ADMIN
        return self.roles.get(workspace_id)


@dataclass(frozen=True, slots=True)
class Workspace:
    """A workspace the caller may reach, with the caller's ``role`` in it."""

    id: int
    slug: str
    title: str
    role: Role


def bearer_token(request: Request[Any, Any, Any]) -> str:
    """The admin token of ``Authorization: Bearer``; raises Unauthorized when there is
    none or it is not shaped like one, so a malformed token costs no database look-up."""
    header = request.headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Unauthorized("send an admin token as 'Authorization: Bearer crk_admin_...'")
    token = token.strip()
    if parse_key(token) is not KeyKind.ADMIN:
        raise Unauthorized("not a valid admin token")
    return token


_PRINCIPAL_COLUMNS = "t.id, t.prefix, t.hash, u.id AS user_id, u.name, u.is_instance_admin"
_NOT_REVOKED_OR_EXPIRED = "t.revoked_at IS NULL AND (t.expires_at IS NULL OR t.expires_at > now())"


def client_address(request: Request[Any, Any, Any]) -> str:
    """The caller's address: the forwarded one behind ``CRANK_TRUSTED_PROXIES``."""
    return request.client.host if request.client else ""


def check_token_attempts(state: AppState, client: str) -> None:
    """Raises TooManyAttempts (429) while ``client`` is past its failed-token limit;
    call it before taking a connection, so a refused attempt costs nothing."""
    wait = state.token_failures.wait_s(client)
    if wait > 0:
        raise TooManyAttempts(retry_after_s(wait))


async def authenticate(conn: Connection, state: AppState, token: str, client: str) -> Principal:
    """The caller of a live admin token (from ``bearer_token``), its use recorded;
    raises Unauthorized (401), counting the failure against ``client``."""
    cur = await conn.execute(
        f"""SELECT {_PRINCIPAL_COLUMNS}
              FROM admin_tokens t JOIN admin_users u ON u.id = t.user_id
             WHERE t.hash = ANY(%s) AND {_NOT_REVOKED_OR_EXPIRED}""",
        (state.hasher.candidates(token),),
    )
    row = await cur.fetchone()
    if row is None:
        state.token_failures.take(client)
        raise Unauthorized("unknown, revoked or expired admin token")
    current = state.hasher.hash(token)
    if row["hash"] != current:  # stored under a previous CRANK_SECRET_KEY: upgrade it
        await conn.execute("UPDATE admin_tokens SET hash = %s WHERE id = %s", (current, row["id"]))
    return await _principal(conn, state, row)


async def authenticate_session(
    conn: Connection, state: AppState, session_hash: bytes
) -> tuple[Principal, str]:
    """The caller of a live console session and the session's CSRF token; the admin
    token it was opened with must still be live. Raises Unauthorized (401)."""
    cur = await conn.execute(
        f"""SELECT {_PRINCIPAL_COLUMNS}, s.csrf
              FROM console_sessions s
              JOIN admin_tokens t ON t.id = s.token_id
              JOIN admin_users u ON u.id = t.user_id
             WHERE s.hash = %s AND s.expires_at > now() AND {_NOT_REVOKED_OR_EXPIRED}""",
        (session_hash,),
    )
    row = await cur.fetchone()
    if row is None:
        raise Unauthorized("the console session has ended: sign in again")
    return await _principal(conn, state, row), row["csrf"]


async def _principal(conn: Connection, state: AppState, row: dict[str, Any]) -> Principal:
    state.token_use.mark(row["id"])
    cur = await conn.execute(
        "SELECT workspace_id, role FROM workspace_members WHERE user_id = %s", (row["user_id"],)
    )
    roles = {r["workspace_id"]: Role[r["role"].upper()] for r in await cur.fetchall()}
    return Principal(
        user_id=row["user_id"],
        name=row["name"],
        token_id=row["id"],
        token_prefix=row["prefix"],
        is_instance_admin=row["is_instance_admin"],
        roles=roles,
    )


async def load_workspace(
    conn: Connection, principal: Principal, slug: str, need: Role = Role.VIEWER
) -> Workspace:
    """The workspace if the caller may act on it with at least ``need``."""
    cur = await conn.execute("SELECT id, slug, title FROM workspaces WHERE slug = %s", (slug,))
    row = await cur.fetchone()
    role = principal.role_in(row["id"]) if row else None
    if row is None or role is None:
        raise NotFound(f"workspace {slug!r} not found")
    if role < need:
        raise Forbidden(
            f"this needs the {need.label} role in workspace {slug!r}; you are {role.label}"
        )
    return Workspace(id=row["id"], slug=row["slug"], title=row["title"], role=role)


def require_instance_admin(principal: Principal) -> None:
    """Raises Forbidden (403) unless the caller is an instance admin."""
    if not principal.is_instance_admin:
        raise Forbidden("this needs an instance admin token")
