"""``/api/v1/workspaces/{workspace}/keys``: agent and approval API keys.

Listing needs the viewer role (it shows prefixes, never keys or hashes);
creating and revoking keys need the owner role. A key is in the creation
response once and nowhere else, ever.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

import msgspec
from litestar import Controller, delete, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from control_plane.api_document import body_example, constrain
from control_plane.api_document.constraints import AGENT_SLUG
from control_plane.auth import Role
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.errors import Conflict
from control_plane.services.keys import (
    IssuedKey,
    KeyView,
    create_api_key,
    list_api_keys,
    revoke_api_key,
)


class KeyCreate(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    agent: str
    kind: Literal["agent", "approval"] = "agent"
    name: Annotated[str, msgspec.Meta(max_length=200)] = ""
    expires_at: Annotated[datetime, msgspec.Meta(tz=True)] | None = None


constrain(KeyCreate, {"agent": AGENT_SLUG})
body_example(KeyCreate, "An agent key", {"agent": "support", "kind": "agent", "name": "laptop"})


class KeyList(msgspec.Struct, kw_only=True):
    items: list[KeyView]


class KeyController(Controller):
    path = "/workspaces/{workspace:str}/keys"
    tags = ["keys"]

    @get("/", access=Role.VIEWER, summary="List API keys (prefixes only), optionally of one agent")
    async def list(
        self, ws: CurrentWorkspace, conn: DbConn, agent: FromQuery[str | None] = None
    ) -> KeyList:
        return KeyList(items=await list_api_keys(conn, ws.id, agent))

    @post(
        "/",
        access=Role.OWNER,
        summary="Create an API key; the response holds the key, shown this once",
        errors=[Conflict],
    )
    async def create(
        self,
        ws: CurrentWorkspace,
        data: JSONBody[KeyCreate],
        conn: DbConn,
        principal: Caller,
        app_state: CrankState,
    ) -> IssuedKey:
        return await create_api_key(
            conn,
            app_state.hasher,
            ws,
            principal.actor,
            agent=data.agent,
            kind=data.kind,
            name=data.name,
            expires_at=data.expires_at,
        )

    @delete(
        "/{key_id:int}",
        access=Role.OWNER,
        status_code=200,
        summary="Revoke an API key",
        description="Revoking a key that is already revoked answers 200 and changes nothing.",
    )
    async def revoke(
        self, ws: CurrentWorkspace, key_id: FromPath[int], conn: DbConn, principal: Caller
    ) -> KeyView:
        return await revoke_api_key(conn, ws, principal.actor, key_id)


handlers: list[Any] = [KeyController]
