"""``GET /api/v1/workspaces/{workspace}/export``: the workspace as an operation file.

The answer *is* the file (control_plane.services.export), so ``curl ... >
crank.yaml`` gives something ``crank apply`` takes. YAML or JSON: ``format``
wins, else an ``Accept`` naming YAML (``application/yaml``,
``application/x-yaml``, ``text/yaml``) gets YAML, else JSON. Viewers may
export: the file holds nothing a viewer cannot read already, and no secret
values. Bindings dropped to keep the file applicable are listed in the
``Crank-Export-Dropped`` header (``agent/operation``, comma-separated).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from litestar import Request, Response, get
from litestar.datastructures import ResponseHeader
from litestar.openapi.datastructures import ResponseSpec
from litestar.params import FromQuery, QueryParameter

from control_plane.auth import Role
from control_plane.deps import CurrentWorkspace, DbConn
from control_plane.errors import Conflict
from control_plane.services.export import ExportFormat, export_workspace, render, to_document
from shared.engine.spec import CrankFile

FormatQuery = Annotated[
    Literal["yaml", "json"] | None,
    QueryParameter(name="format", description="yaml or json; default from Accept, else json"),
]
DROPPED_HEADER = "Crank-Export-Dropped"
_YAML_TYPES = ("application/yaml", "application/x-yaml", "text/yaml", "text/x-yaml")
_MEDIA_TYPES: dict[ExportFormat, str] = {
    "yaml": "application/yaml; charset=utf-8",
    "json": "application/json",
}
# The answer is rendered here (YAML or JSON), so the document names its schema:
# the operation file, in either media type (the YAML parses to the same object).
_THE_FILE = ResponseSpec(
    data_container=CrankFile,
    generate_examples=False,
    description="The operation file, as JSON or YAML",
)
_HEADERS = [
    ResponseHeader(name="Vary", documentation_only=True, description="`Accept`"),
    ResponseHeader(
        name=DROPPED_HEADER,
        documentation_only=True,
        description="Bindings left out to keep the file applicable: `agent/operation`, ...",
    ),
]


def _negotiate(request: Request[Any, Any, Any], fmt: ExportFormat | None) -> ExportFormat:
    if fmt is not None:
        return fmt
    accept = request.headers.get("accept", "").lower()
    return "yaml" if any(kind in accept for kind in _YAML_TYPES) else "json"


@get(
    "/workspaces/{workspace:str}/export",
    access=Role.VIEWER,
    tags=["apply"],
    summary="Export the workspace as an operation file (what apply takes back)",
    description=(
        "Drafts by default; `published=true` exports what the gateways serve (latest published "
        "versions, published agents). `format=yaml|json`, else YAML when `Accept` names it, "
        "else JSON. Never secret values; `request.auth.secret` names only. Needs the viewer role."
    ),
    responses={200: _THE_FILE},
    response_headers=_HEADERS,
    errors=[Conflict],
    also_as=[_MEDIA_TYPES["yaml"].split(";")[0]],
)
async def export_workspace_file(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    conn: DbConn,
    published: FromQuery[bool] = False,
    fmt: FormatQuery = None,
) -> Response[bytes]:
    export = await export_workspace(conn, ws, published=published)
    fmt = _negotiate(request, fmt)
    headers = {"Vary": "Accept"}
    if export.dropped:
        headers[DROPPED_HEADER] = ", ".join(f"{d.agent}/{d.operation}" for d in export.dropped)
    return Response(
        render(to_document(export.file), fmt), media_type=_MEDIA_TYPES[fmt], headers=headers
    )


handlers: list[Any] = [export_workspace_file]
