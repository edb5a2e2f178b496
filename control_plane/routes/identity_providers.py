"""``/api/v1/workspaces/{workspace}/identity-providers``: the OpenID Connect /
OAuth 2.1 providers whose tokens the workspace's agents may accept.

Reading needs the viewer role; creating, replacing and deleting need the owner
role (whom a workspace trusts is the owner's call, like its egress policy).
Replacing and deleting take ``If-Match``. Every change is audited and reaches
the gateways through the catalog version (docs/architecture.md, "Identity").
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Response, delete, get, post, put
from litestar.params import JSONBody

from control_plane.api_document import ProviderNamePath, body_example, constrain
from control_plane.auth import Role
from control_plane.deps import Caller, CurrentWorkspace, DbConn, IfMatch
from control_plane.errors import Conflict
from control_plane.etag import ETAG_HEADER
from control_plane.services.identity_providers import (
    MAX_CLAIM_CHARS,
    ProviderRow,
    ProviderView,
    create_provider,
    delete_provider,
    list_providers,
    require_provider,
    update_provider,
)
from shared.engine.spec import IdentityProviderSpec
from shared.engine.spec_validation import SLUG
from shared.identity.issuers import ASYMMETRIC_ALGORITHMS, MAX_LEEWAY_S, TOKEN_TYPES

_SETTINGS_CONSTRAINTS: dict[str, dict[str, Any]] = {
    "algorithms": {"items": {"enum": sorted(ASYMMETRIC_ALGORITHMS)}, "min_items": 1},
    "token_types": {"items": {"enum": sorted(TOKEN_TYPES)}, "min_items": 1},
    "subject_claim": {"min_length": 1, "max_length": MAX_CLAIM_CHARS},
    "groups_claim": {"min_length": 1, "max_length": MAX_CLAIM_CHARS},
    "leeway_s": {"minimum": 0, "maximum": MAX_LEEWAY_S},
}
constrain(
    IdentityProviderSpec, {**_SETTINGS_CONSTRAINTS, "name": {"pattern": f"^(?:{SLUG.pattern})$"}}
)
body_example(
    IdentityProviderSpec,
    "A company IdP issuing RFC 9068 access tokens, groups in a claim",
    {
        "name": "corp",
        "issuer": "https://id.example.com",
        "algorithms": ["RS256", "ES256"],
        "token_types": ["at+jwt"],
        "subject_claim": "sub",
        "groups_claim": "groups",
        "leeway_s": 30,
    },
)


class ProviderList(msgspec.Struct, kw_only=True):
    items: list[ProviderView]


def _with_etag(row: ProviderRow, status_code: int = 200) -> Response[ProviderView]:
    return Response(row.view, status_code=status_code, headers={"ETag": row.etag})


class IdentityProviderController(Controller):
    path = "/workspaces/{workspace:str}/identity-providers"
    tags = ["identity providers"]

    @get("/", access=Role.VIEWER, summary="List the workspace's trusted identity providers")
    async def list(self, ws: CurrentWorkspace, conn: DbConn) -> ProviderList:
        return ProviderList(items=await list_providers(conn, ws))

    @post(
        "/",
        access=Role.OWNER,
        summary="Trust an identity provider (owner)",
        description=(
            "The issuer is stored byte for byte as given (it is compared with tokens' `iss`); "
            "https, or http to loopback only. Metadata and keys are discovered from it "
            "(RFC 8414 / OpenID discovery). Only asymmetric algorithms are accepted. "
            "`introspection.client_secret` names a workspace secret that must exist. "
            "Reaches the gateways with the catalog, like a publish."
        ),
        response_headers=[ETAG_HEADER],
        errors=[Conflict],
    )
    async def create(
        self,
        ws: CurrentWorkspace,
        data: JSONBody[IdentityProviderSpec],
        conn: DbConn,
        principal: Caller,
    ) -> Response[ProviderView]:
        return _with_etag(await create_provider(conn, ws, principal.actor, data), 201)

    @get(
        "/{provider:str}",
        access=Role.VIEWER,
        summary="Read an identity provider",
        response_headers=[ETAG_HEADER],
    )
    async def read(
        self, ws: CurrentWorkspace, provider: ProviderNamePath, conn: DbConn
    ) -> Response[ProviderView]:
        return _with_etag(await require_provider(conn, ws, provider))

    @put(
        "/{provider:str}",
        access=Role.OWNER,
        summary="Replace an identity provider's settings (owner; If-Match required)",
        description=(
            "The body is a whole provider, its `name` the URL's; omitted fields take their "
            "defaults. An unchanged write changes nothing."
        ),
        response_headers=[ETAG_HEADER],
        errors=[Conflict],
    )
    async def replace(
        self,
        ws: CurrentWorkspace,
        provider: ProviderNamePath,
        data: JSONBody[IdentityProviderSpec],
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> Response[ProviderView]:
        return _with_etag(
            await update_provider(conn, ws, principal.actor, provider, data, if_match)
        )

    @delete(
        "/{provider:str}",
        access=Role.OWNER,
        summary="Stop trusting an identity provider (owner; If-Match required)",
        description="Refused (409) while an agent's `auth.providers` names it.",
        errors=[Conflict],
    )
    async def remove(
        self,
        ws: CurrentWorkspace,
        provider: ProviderNamePath,
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> None:
        await delete_provider(conn, ws, principal.actor, provider, if_match)


handlers: list[Any] = [IdentityProviderController]
