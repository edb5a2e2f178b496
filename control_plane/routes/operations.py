"""``/api/v1/workspaces/{workspace}/operations``: drafts, publishing and versions.

Reads need the viewer role, writes the editor role; every write carries
``If-Match`` with the draft's ETag (creating excepted). The ETag is the
operation's id and the draft's revision (``"<id>.r<revision>"``), so a
publish, which does not change the draft, keeps it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

import msgspec
from litestar import Controller, Response, delete, get, post, put
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromQuery, JSONBody, QueryParameter
from litestar.status_codes import HTTP_200_OK, HTTP_201_CREATED

from control_plane.api_document import OperationNamePath, VersionPath
from control_plane.auth import Role
from control_plane.deps import Caller, CurrentWorkspace, DbConn, IfMatch
from control_plane.errors import Conflict, LintFailed, ValidationFailed
from control_plane.etag import ETAG_HEADER, Precondition, etag
from control_plane.services import operations as service
from shared.engine.spec import OperationSpec, operation_from_builtins
from shared.engine.spec_validation import FieldError


class OperationList(msgspec.Struct, kw_only=True):
    items: list[service.OperationSummary]
    next_cursor: str | None


class OperationView(msgspec.Struct, kw_only=True):
    name: str
    draft: OperationSpec
    revision: int
    latest_version: int | None
    draft_changed: bool
    created_at: datetime
    updated_at: datetime


class VersionList(msgspec.Struct, kw_only=True):
    items: list[service.VersionInfo]


class VersionView(msgspec.Struct, kw_only=True):
    name: str
    version: int
    spec: OperationSpec
    published_at: datetime
    published_by: str


def _view(row: service.OperationRow, status_code: int = HTTP_200_OK) -> Response[OperationView]:
    view = OperationView(
        name=row.name,
        draft=operation_from_builtins(row.draft),
        revision=row.revision,
        latest_version=row.latest_version,
        draft_changed=row.draft_changed,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )
    return Response(view, status_code=status_code, headers={"ETag": etag(row.id, row.revision)})


PageSize = Annotated[int, QueryParameter(ge=1, le=500, description="items per page")]
StateFilter = Annotated[
    service.ListState | None,
    # "state" is Litestar's reserved name for the app state, so the parameter is renamed.
    QueryParameter(name="state", description="draft, published or ahead (of the latest)"),
]
SpecRefQuery = Annotated[
    str, QueryParameter(max_length=20, description="'draft' or a published version number")
]
SearchText = Annotated[
    str | None,
    QueryParameter(max_length=200, description="text the name or title contains (any case)"),
]


# A publish or rollback that makes no version answers 200 (201 when it makes one).
_UNCHANGED = ResponseSpec(
    data_container=service.PublishResult,
    generate_examples=False,
    description="Nothing to publish: the draft equals the latest version (`changed: false`)",
)


class OperationController(Controller):
    path = "/workspaces/{workspace:str}/operations"
    tags = ["operations"]

    @get("/", access=Role.VIEWER, summary="List operations with their draft and publish state")
    async def list(
        self,
        ws: CurrentWorkspace,
        conn: DbConn,
        cursor: FromQuery[str | None] = None,
        limit: PageSize = 100,
        publish_state: StateFilter = None,
        q: SearchText = None,
    ) -> OperationList:
        items, next_cursor = await service.list_operations(
            conn, ws.id, after=cursor, limit=limit, state=publish_state, text=q
        )
        return OperationList(items=items, next_cursor=next_cursor)

    @post(
        "/",
        access=Role.EDITOR,
        summary="Create an operation (its draft; nothing is published)",
        response_headers=[ETAG_HEADER],
        errors=[Conflict],
    )
    async def create(
        self,
        ws: CurrentWorkspace,
        data: JSONBody[OperationSpec],
        conn: DbConn,
        principal: Caller,
    ) -> Response[OperationView]:
        row = await service.create_operation(conn, ws, principal.actor, data)
        return _view(row, HTTP_201_CREATED)

    @get(
        "/{name:str}",
        access=Role.VIEWER,
        summary="Read an operation's draft; the ETag is its revision",
        response_headers=[ETAG_HEADER],
    )
    async def read(
        self, ws: CurrentWorkspace, name: OperationNamePath, conn: DbConn
    ) -> Response[OperationView]:
        return _view(await service.require_operation(conn, ws, name))

    @put(
        "/{name:str}",
        access=Role.EDITOR,
        summary="Replace the draft (If-Match required)",
        response_headers=[ETAG_HEADER],
    )
    async def update(
        self,
        ws: CurrentWorkspace,
        name: OperationNamePath,
        data: JSONBody[OperationSpec],
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> Response[OperationView]:
        row = await service.update_operation_draft(conn, ws, principal.actor, name, data, if_match)
        return _view(row)

    @delete(
        "/{name:str}/draft",
        access=Role.EDITOR,
        status_code=HTTP_200_OK,
        summary="Discard the draft: back to the latest version, or delete if never published",
        description="The ETag is sent when an earlier version remains (not when it was deleted).",
        response_headers=[ETAG_HEADER],
    )
    async def discard_draft(
        self,
        ws: CurrentWorkspace,
        name: OperationNamePath,
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> Response[service.DiscardResult]:
        result = await service.discard_draft(conn, ws, principal.actor, name, if_match)
        headers = {} if result.revision is None else {"ETag": etag(if_match.id, result.revision)}
        return Response(result, headers=headers)

    @post(
        "/{name:str}/publish",
        access=Role.EDITOR,
        summary="Publish the draft as a new version (201), or nothing if unchanged (200)",
        response_headers=[ETAG_HEADER],
        responses={HTTP_200_OK: _UNCHANGED},
        errors=[LintFailed],
    )
    async def publish(
        self,
        ws: CurrentWorkspace,
        name: OperationNamePath,
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> Response[service.PublishResult]:
        result = await service.publish_operation(conn, ws, principal.actor, name, if_match)
        return _publish_response(result, if_match)

    @get(
        "/{name:str}/versions", access=Role.VIEWER, summary="List published versions, newest first"
    )
    async def versions(
        self, ws: CurrentWorkspace, name: OperationNamePath, conn: DbConn
    ) -> VersionList:
        return VersionList(items=await service.list_versions(conn, ws, name))

    @get(
        "/{name:str}/versions/{version:int}",
        access=Role.VIEWER,
        summary="Read one published version",
    )
    async def version(
        self, ws: CurrentWorkspace, name: OperationNamePath, version: VersionPath, conn: DbConn
    ) -> VersionView:
        row = await service.get_version(conn, ws, name, version)
        return VersionView(
            name=name,
            version=row.version,
            spec=operation_from_builtins(row.spec),
            published_at=row.published_at,
            published_by=row.published_by,
        )

    @get("/{name:str}/diff", access=Role.VIEWER, summary="What publishing the draft would change")
    async def diff(
        self, ws: CurrentWorkspace, name: OperationNamePath, conn: DbConn
    ) -> service.Diff:
        return await service.diff_operation(conn, ws, name)

    @get(
        "/{name:str}/compare",
        access=Role.VIEWER,
        summary="Compare any two specs of an operation: published versions or the draft",
    )
    async def compare(
        self,
        ws: CurrentWorkspace,
        name: OperationNamePath,
        conn: DbConn,
        before: SpecRefQuery = "",
        after: SpecRefQuery = service.DRAFT,
    ) -> service.Comparison:
        before_ref = service.parse_spec_ref(before) if before else None
        after_ref = service.parse_spec_ref(after)
        wrong = [("before", before)] if before and before_ref is None else []
        wrong += [("after", after)] if after_ref is None else []
        if wrong or after_ref is None:
            raise ValidationFailed(
                [
                    FieldError(field, f"{text!r} is neither 'draft' nor a version number")
                    for field, text in wrong
                ]
            )
        return await service.compare_operation(conn, ws, name, before_ref, after_ref)

    @post(
        "/{name:str}/versions/{version:int}/rollback",
        access=Role.EDITOR,
        summary="Publish an earlier version again as a new version; the draft becomes it",
        response_headers=[ETAG_HEADER],
        responses={HTTP_200_OK: _UNCHANGED},
        errors=[LintFailed],
    )
    async def rollback(
        self,
        ws: CurrentWorkspace,
        name: OperationNamePath,
        version: VersionPath,
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> Response[service.PublishResult]:
        result = await service.rollback_operation(
            conn, ws, principal.actor, name, version, if_match
        )
        return _publish_response(result, if_match)


def _publish_response(
    result: service.PublishResult, expected: Precondition
) -> Response[service.PublishResult]:
    """The write succeeded, so ``expected`` named this very operation: its id is the row's."""
    return Response(
        result,
        status_code=HTTP_201_CREATED if result.changed else HTTP_200_OK,
        headers={"ETag": etag(expected.id, result.revision)},
    )


handlers: list[Any] = [OperationController]
