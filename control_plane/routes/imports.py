"""``POST /api/v1/workspaces/{workspace}/import/openapi``: what ``crank import-openapi`` calls.

The body gives the document inline (``document``: parsed JSON, or JSON/YAML
text) or by ``url``, fetched by the control plane through the same SSRF guard
as upstream calls (``CRANK_ALLOW_PRIVATE_UPSTREAMS``,
``CRANK_UPSTREAM_ALLOWLIST``) and the workspace's egress policy. Parsing and converting a large document is
CPU work, so it runs in a worker thread, off the event loop. Imports write
drafts only (editor role) and never publish.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
from litestar import post
from litestar.params import JSONBody
from litestar.status_codes import HTTP_200_OK

from control_plane.api_document import body_example
from control_plane.auth import Role
from control_plane.deps import Caller, CrankState, CurrentWorkspace, DbConn
from control_plane.errors import BadRequest
from control_plane.openapi_import import (
    ImportOptions,
    ImportResult,
    SpecError,
    fetch_document,
    import_document,
    parse_document,
)
from control_plane.request_body import BodyLimit
from control_plane.services.egress_remedy import egress_remedy
from control_plane.services.imports import ImportReport, import_openapi
from shared.engine.spec_validation import FieldError
from shared.engine.ssrf import AddressPolicy
from shared.workspace_egress import load_egress


class OpenApiImportRequest(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    document: dict[str, Any] | str | None = None  # the document, parsed or as JSON/YAML text
    url: str | None = None  # or where to fetch it (http/https, through the SSRF guard)
    include: list[str] = msgspec.field(default_factory=list)  # tag:X, path:/x/*, operation:id
    exclude: list[str] = msgspec.field(default_factory=list)
    agent: str | None = None  # bind the imported operations to this agent's draft
    base_url: str | None = None  # instead of the document's servers
    name_prefix: str = ""
    dry_run: bool = False
    overwrite: bool = False  # also replace drafts edited since the last import


body_example(
    OpenApiImportRequest,
    "A one-operation OpenAPI document, imported as drafts without writing (dry run)",
    {
        "document": {
            "openapi": "3.0.3",
            "info": {"title": "Orders", "version": "1"},
            "servers": [{"url": "https://api.example.com"}],
            "paths": {
                "/orders/{order_id}": {
                    "get": {
                        "operationId": "get_order",
                        "summary": "Get one order by id",
                        "parameters": [
                            {
                                "name": "order_id",
                                "in": "path",
                                "required": True,
                                "schema": {"type": "string"},
                            }
                        ],
                        "responses": {"200": {"description": "The order"}},
                    }
                }
            },
        },
        "dry_run": True,
    },
)


def _convert(data: OpenApiImportRequest, raw: bytes | None) -> ImportResult:
    document: Any = data.document
    if raw is not None or isinstance(document, str):
        document = parse_document(raw if raw is not None else str(document))
    assert isinstance(document, dict)
    options = ImportOptions(
        include=tuple(data.include),
        exclude=tuple(data.exclude),
        agent=data.agent,
        base_url=data.base_url,
        name_prefix=data.name_prefix,
        source_url=data.url,
    )
    return import_document(document, options, validate=False)


@post(
    "/workspaces/{workspace:str}/import/openapi",
    access=Role.EDITOR,
    status_code=HTTP_200_OK,
    tags=["import"],
    summary="Import an OpenAPI 3.0/3.1 or Swagger 2.0 document into drafts",
    description=(
        "Creates or updates draft operations (and an agent's draft, with `agent`); never "
        "publishes. Drafts edited since the last import are not overwritten: they come back "
        "as `conflicts` with a diff, unless `overwrite` is true. `dry_run` reports the same "
        "and writes nothing. A document that cannot be read gets 400 `openapi_invalid`; a "
        "URL the SSRF guard refuses 400 `upstream_blocked`, its message saying what to "
        "change when the workspace's egress policy or the operator's allowlist refused it."
    ),
    body_limit=BodyLimit.DOCUMENT,
)
async def import_openapi_document(
    ws: CurrentWorkspace,
    data: JSONBody[OpenApiImportRequest],
    conn: DbConn,
    principal: Caller,
    app_state: CrankState,
) -> ImportReport:
    if (data.document is None) == (data.url is None):
        raise BadRequest(
            "give the document or its url, not both",
            errors=[FieldError("document", "exactly one of document and url is required")],
        )
    settings = app_state.settings
    try:
        raw = None
        if data.url is not None:
            policy = AddressPolicy.from_settings(
                allow_private_upstreams=settings.allow_private_upstreams,
                upstream_allowlist=settings.upstream_allowlist,
                allow_loopback_upstreams=settings.allow_loopback_upstreams,
            )
            raw = await fetch_document(
                data.url, policy, await load_egress(conn, ws.id), settings.max_document_bytes
            )
        result = await asyncio.to_thread(_convert, data, raw)
    except SpecError as exc:
        remedy = egress_remedy(
            exc.blocked,
            ws.slug,
            settings.language,
            instance_admin=ws.role is Role.INSTANCE_ADMIN,
        )
        message = exc.message if remedy is None else f"{exc.message}. {remedy}"
        raise BadRequest(message, code=exc.code) from None
    return await import_openapi(
        conn,
        ws,
        principal.actor,
        result,
        source=data.url or "upload",
        dry_run=data.dry_run,
        overwrite=data.overwrite,
    )


handlers: list[Any] = [import_openapi_document]
