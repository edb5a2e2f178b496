"""``/api/v1/workspaces/{workspace}/agents``: agent drafts, publish and unpublish.

Reads need the viewer role, writes the editor role; deleting an agent needs
the owner role, because it deletes the agent's API keys, which only owners
manage. Every write carries ``If-Match`` with the ETag of the agent
(``"<id>.r<revision>"``, the draft's revision): 428 without it, 409
``stale_revision`` when the draft changed since or the agent was deleted and
created again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
from litestar import Controller, Response, delete, get, post, put
from litestar.params import JSONBody

from control_plane.api_document import AgentSlugPath
from control_plane.auth import Role
from control_plane.deps import Caller, CurrentWorkspace, DbConn, IfMatch
from control_plane.errors import Conflict, LintFailed
from control_plane.etag import ETAG_HEADER, etag
from control_plane.lint import Finding
from control_plane.services.agents import (
    AgentRow,
    PublishWarning,
    create_agent,
    delete_agent,
    list_agents,
    publish_agent,
    require_agent,
    unpublish_agent,
    update_agent_draft,
)
from shared.engine.spec import AgentAuth, AgentSpec, ConfirmationMode, RateLimit


class PublishedAgent(msgspec.Struct, kw_only=True):
    title: str
    description: str
    operations: list[str]
    rate_limit: RateLimit | None
    confirmation_mode: ConfirmationMode = "auto"  # published before the field existed: auto
    approval_wait_s: int | None = None
    auth: AgentAuth = msgspec.field(default_factory=AgentAuth)  # who may call besides keys


class AgentView(msgspec.Struct, kw_only=True):
    slug: str
    draft: AgentSpec
    revision: int
    published: PublishedAgent | None
    published_version: int
    published_at: datetime | None
    created_at: datetime
    updated_at: datetime


class AgentSummary(msgspec.Struct, kw_only=True):
    slug: str
    title: str
    revision: int
    published: bool
    published_version: int
    updated_at: datetime


class AgentList(msgspec.Struct, kw_only=True):
    items: list[AgentSummary]


class PublishOutcome(msgspec.Struct, kw_only=True):
    published_version: int
    changed: bool
    warnings: list[PublishWarning]
    agent: AgentView
    findings: list[Finding]  # the linter's warnings (errors refuse the publish: 422)


def _view(row: AgentRow) -> AgentView:
    return AgentView(
        slug=row.slug,
        draft=msgspec.convert(row.draft, AgentSpec),
        revision=row.revision,
        published=None if row.published is None else msgspec.convert(row.published, PublishedAgent),
        published_version=row.published_version,
        published_at=row.published_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def _with_etag(row: AgentRow, status_code: int = 200) -> Response[AgentView]:
    return Response(
        _view(row), status_code=status_code, headers={"ETag": etag(row.id, row.revision)}
    )


class AgentController(Controller):
    path = "/workspaces/{workspace:str}/agents"
    tags = ["agents"]

    @get("/", access=Role.VIEWER, summary="List the workspace's agents")
    async def list(self, ws: CurrentWorkspace, conn: DbConn) -> AgentList:
        return AgentList(
            items=[
                AgentSummary(
                    slug=row.slug,
                    title=row.draft["title"],
                    revision=row.revision,
                    published=row.published is not None,
                    published_version=row.published_version,
                    updated_at=row.updated_at,
                )
                for row in await list_agents(conn, ws.id)
            ]
        )

    @post(
        "/",
        access=Role.EDITOR,
        summary="Create an agent draft",
        response_headers=[ETAG_HEADER],
        errors=[Conflict],
    )
    async def create(
        self, ws: CurrentWorkspace, data: JSONBody[AgentSpec], conn: DbConn, principal: Caller
    ) -> Response[AgentView]:
        return _with_etag(await create_agent(conn, ws, principal.actor, data), 201)

    @get(
        "/{slug:str}",
        access=Role.VIEWER,
        summary="Read an agent: its draft and its published state",
        response_headers=[ETAG_HEADER],
    )
    async def read(
        self, ws: CurrentWorkspace, slug: AgentSlugPath, conn: DbConn
    ) -> Response[AgentView]:
        return _with_etag(await require_agent(conn, ws, slug))

    @put(
        "/{slug:str}",
        access=Role.EDITOR,
        summary="Replace an agent's draft (If-Match required)",
        response_headers=[ETAG_HEADER],
    )
    async def replace(
        self,
        ws: CurrentWorkspace,
        slug: AgentSlugPath,
        data: JSONBody[AgentSpec],
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> Response[AgentView]:
        return _with_etag(await update_agent_draft(conn, ws, principal.actor, slug, data, if_match))

    @post(
        "/{slug:str}/publish",
        access=Role.EDITOR,
        status_code=200,
        summary="Publish the agent's draft (If-Match required)",
        description=(
            "Bound operations without a published version stay bound but are left out of the "
            "catalog until they are published; each is reported in `warnings`. Publishing a "
            "draft equal to the published state answers `changed: false` and makes no version."
        ),
        response_headers=[ETAG_HEADER],
        errors=[LintFailed],
    )
    async def publish(
        self,
        ws: CurrentWorkspace,
        slug: AgentSlugPath,
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> Response[PublishOutcome]:
        result = await publish_agent(conn, ws, principal.actor, slug, if_match)
        outcome = PublishOutcome(
            published_version=result.published_version,
            changed=result.changed,
            warnings=result.warnings,
            agent=_view(result.agent),
            findings=result.findings,
        )
        return Response(outcome, headers={"ETag": etag(result.agent.id, result.agent.revision)})

    @post(
        "/{slug:str}/unpublish",
        access=Role.EDITOR,
        status_code=200,
        summary="Take the agent off the gateways (If-Match required)",
        response_headers=[ETAG_HEADER],
    )
    async def unpublish(
        self,
        ws: CurrentWorkspace,
        slug: AgentSlugPath,
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> Response[AgentView]:
        return _with_etag(await unpublish_agent(conn, ws, principal.actor, slug, if_match))

    @delete(
        "/{slug:str}",
        access=Role.OWNER,
        summary="Delete an agent and its keys (owner; If-Match required)",
    )
    async def remove(
        self,
        ws: CurrentWorkspace,
        slug: AgentSlugPath,
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> None:
        await delete_agent(conn, ws, principal.actor, slug, if_match)


handlers: list[Any] = [AgentController]
