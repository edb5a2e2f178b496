"""An agent's identity settings (``auth``) checked against its workspace
(docs/architecture.md, "Identity (in progress)").

The providers an agent names must exist in the workspace, and a provider an
agent still names cannot be deleted. An agent that refuses agent keys cannot
be published yet: the gateway does not check tokens, so it would accept no
caller at all.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from control_plane.auth import Workspace
from control_plane.errors import Conflict, ValidationFailed
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


def refuse_keyless(state: dict[str, Any]) -> None:
    """Refuse to publish an agent with ``agent_keys: false`` until the gateway checks tokens."""
    if state.get("auth", {}).get("agent_keys", True) is False:
        raise ValidationFailed(
            [
                FieldError(
                    "auth.agent_keys",
                    "cannot be false yet: the gateway does not check identity provider tokens "
                    "yet, so the agent would accept no caller (publish with agent_keys: true)",
                )
            ]
        )


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
