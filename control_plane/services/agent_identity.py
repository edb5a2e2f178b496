"""An agent's identity settings (``auth``) checked against its workspace
(docs/architecture.md, "Identity").

The providers an agent names must exist in the workspace, and a provider an
agent still names cannot be deleted.
"""

from __future__ import annotations

from collections.abc import Collection

from control_plane.auth import Workspace
from control_plane.errors import Conflict
from shared.db import Connection
from shared.engine.spec_validation import FieldError


async def unknown_providers(
    conn: Connection, ws: Workspace, names: list[str], flagged: Collection[str] = ()
) -> list[FieldError]:
    """An error on ``auth.providers[i]`` for each name the workspace has no provider by."""
    if not names:
        return []
    cur = await conn.execute(
        """SELECT name FROM identity_providers WHERE workspace_id = %s AND name = ANY(%s)
            ORDER BY id FOR KEY SHARE""",
        (ws.id, names),
    )
    existing = {row["name"] for row in await cur.fetchall()}
    return [
        FieldError(f"auth.providers[{i}]", f"no identity provider named {name!r} in {ws.slug!r}")
        for i, name in enumerate(names)
        if name not in existing and f"auth.providers[{i}]" not in flagged
    ]


async def agents_naming(conn: Connection, ws: Workspace, provider: str) -> list[str]:
    """The agents whose draft or published state names ``provider``."""
    cur = await conn.execute(
        """SELECT slug FROM agents WHERE workspace_id = %(ws)s
              AND (coalesce(draft->'auth'->'providers', '[]') ? %(name)s
                   OR coalesce(published->'auth'->'providers', '[]') ? %(name)s)
            ORDER BY slug""",
        {"ws": ws.id, "name": provider},
    )
    return [row["slug"] for row in await cur.fetchall()]


async def refuse_if_named(conn: Connection, ws: Workspace, provider: str) -> None:
    if slugs := await agents_naming(conn, ws, provider):
        raise Conflict(
            f"identity provider {provider!r} is named by agents {', '.join(slugs)}; "
            "remove it from their auth.providers first"
        )
