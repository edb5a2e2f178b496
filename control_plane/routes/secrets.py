"""``/api/v1/workspaces/{workspace}/secrets``: write-only upstream credentials.

Listing (names and times, never values) needs the viewer role; setting and
deleting need the editor role. ``POST /api/v1/secrets/rotate-key`` (instance
admins only) re-seals every stored secret under the current key. Secrets take no ``If-Match``: they have no
readable state a client could have based its write on, so there is nothing
to conflict on — a PUT replaces the value, last write wins.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Response, delete, get, post, put
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import JSONBody

from control_plane.access import INSTANCE_ADMIN
from control_plane.api_document import SecretNamePath, body_example
from control_plane.auth import Role
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.services.key_rotation import RotationReport, rotate_key
from control_plane.services.secrets import SecretView, delete_secret, list_secrets, set_secret


class SecretSet(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    value: str


body_example(SecretSet, "A secret's value", {"value": "sk_live_example"})


class SecretList(msgspec.Struct, kw_only=True):
    items: list[SecretView]


class SecretController(Controller):
    path = "/workspaces/{workspace:str}/secrets"
    tags = ["secrets"]

    @get("/", access=Role.VIEWER, summary="List secret names (values are never returned)")
    async def list(self, ws: CurrentWorkspace, conn: DbConn) -> SecretList:
        return SecretList(items=await list_secrets(conn, ws.id))

    @put(
        "/{name:str}",
        access=Role.EDITOR,
        summary="Create (201) or replace (200) a secret",
        description="The value is encrypted at rest and never returned by any endpoint.",
        responses={201: ResponseSpec(data_container=SecretView, description="Secret created")},
    )
    async def store(
        self,
        ws: CurrentWorkspace,
        name: SecretNamePath,
        data: JSONBody[SecretSet],
        conn: DbConn,
        principal: Caller,
        app_state: CrankState,
    ) -> Response[SecretView]:
        stored = await set_secret(conn, app_state.box, ws, principal.actor, name, data.value)
        return Response(stored.view, status_code=201 if stored.created else 200)

    @delete("/{name:str}", access=Role.EDITOR, summary="Delete a secret")
    async def remove(
        self, ws: CurrentWorkspace, name: SecretNamePath, conn: DbConn, principal: Caller
    ) -> None:
        await delete_secret(conn, ws, principal.actor, name)


@post(
    "/secrets/rotate-key",
    access=INSTANCE_ADMIN,
    tags=["secrets"],
    status_code=200,
    summary="Re-encrypt every stored secret under the current key (instance admins only)",
    description=(
        "Workspace secrets and webhook signing secrets sealed with a key listed in "
        "CRANK_SECRET_KEY_PREVIOUS are sealed again with CRANK_SECRET_KEY, in batches, "
        "while gateways keep serving. Values no configured key opens are listed in "
        "`unreadable` (workspace and name, never a value) and left unchanged. Running it "
        "again rotates nothing more."
    ),
)
async def rotate_secret_key(principal: Caller, app_state: CrankState) -> RotationReport:
    return await rotate_key(app_state.pool, app_state.box, principal.actor)


handlers: list[Any] = [SecretController, rotate_secret_key]
