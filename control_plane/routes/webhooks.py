"""``/api/v1/workspaces/{workspace}/agents/{agent}/webhooks``: signed webhook
subscriptions of an agent and their delivery log (docs/admin-api.md, "Webhooks").

Listing, reading and the delivery log need the viewer role; creating and
deleting need the editor role. The signing secret is in the creation answer
once and nowhere else, ever. A subscription cannot be changed: create a new
one and delete the old.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, delete, get, post
from litestar.params import FromPath, FromQuery, JSONBody

from control_plane.api_document import AgentSlugPath
from control_plane.auth import Role
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.services.audit_query import DEFAULT_LIMIT
from control_plane.services.webhooks import (
    CreatedWebhook,
    DeliveryPage,
    WebhookView,
    create_webhook,
    get_webhook,
    list_deliveries,
    list_webhooks,
    revoke_webhook,
)
from shared.engine.spec import WebhookSpec


class WebhookList(msgspec.Struct, kw_only=True):
    items: list[WebhookView]


class WebhookController(Controller):
    path = "/workspaces/{workspace:str}/agents/{agent:str}/webhooks"
    tags = ["webhooks"]

    @get("/", access=Role.VIEWER, summary="List an agent's webhook subscriptions")
    async def list(self, ws: CurrentWorkspace, agent: AgentSlugPath, conn: DbConn) -> WebhookList:
        return WebhookList(items=await list_webhooks(conn, ws, agent))

    @post(
        "/",
        access=Role.EDITOR,
        summary="Subscribe a URL to approval events; the answer holds the signing secret once",
    )
    async def create(
        self,
        ws: CurrentWorkspace,
        agent: AgentSlugPath,
        data: JSONBody[WebhookSpec],
        conn: DbConn,
        principal: Caller,
        app_state: CrankState,
    ) -> CreatedWebhook:
        return await create_webhook(conn, app_state.box, ws, principal.actor, agent, data)

    @get("/{webhook_id:str}", access=Role.VIEWER, summary="Read one webhook subscription")
    async def read(
        self, ws: CurrentWorkspace, agent: AgentSlugPath, webhook_id: FromPath[str], conn: DbConn
    ) -> WebhookView:
        return await get_webhook(conn, ws, agent, webhook_id)

    @delete(
        "/{webhook_id:str}",
        access=Role.EDITOR,
        status_code=200,
        summary="Revoke a webhook subscription; deliveries not yet made fail",
        description="Revoking a revoked subscription answers 200 and changes nothing.",
    )
    async def revoke(
        self,
        ws: CurrentWorkspace,
        agent: AgentSlugPath,
        webhook_id: FromPath[str],
        conn: DbConn,
        principal: Caller,
    ) -> WebhookView:
        return await revoke_webhook(conn, ws, principal.actor, agent, webhook_id)

    @get(
        "/{webhook_id:str}/deliveries",
        access=Role.VIEWER,
        summary="The subscription's delivery log, newest first",
        description="Pass `next_cursor` back as `cursor` for the next page; it is null on the last.",
    )
    async def deliveries(
        self,
        ws: CurrentWorkspace,
        agent: AgentSlugPath,
        webhook_id: FromPath[str],
        conn: DbConn,
        limit: FromQuery[int] = DEFAULT_LIMIT,
        cursor: FromQuery[str | None] = None,
    ) -> DeliveryPage:
        return await list_deliveries(conn, ws, agent, webhook_id, limit=limit, cursor=cursor)


handlers: list[Any] = [WebhookController]
