"""``/api/v1/workspaces/{workspace}/egress``: what the workspace's operations may call.

Reading needs the viewer role. The host list is the owner's (it only narrows);
the private grants are instance admins' (docs/architecture.md, "Egress per
workspace"). Both writes take ``If-Match`` with the policy's ETag, are audited
and reach the gateways through the catalog version.
"""

from __future__ import annotations

from typing import Any

import msgspec
from litestar import Controller, Response, get, put
from litestar.params import JSONBody

from control_plane.api_document import body_example, constrain
from control_plane.auth import Role
from control_plane.deps import Caller, CurrentWorkspace, DbConn, IfMatch
from control_plane.etag import ETAG_HEADER
from control_plane.services.egress import (
    EgressRow,
    EgressView,
    read_egress,
    set_grants,
    set_hosts,
)
from shared.engine.egress import MAX_EGRESS_ENTRIES


class HostsSet(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    hosts: list[str] | None  # None: any host


class GrantsSet(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    grants: list[str]


constrain(HostsSet, {"hosts": {"max_items": MAX_EGRESS_ENTRIES}})
constrain(GrantsSet, {"grants": {"max_items": MAX_EGRESS_ENTRIES}})
body_example(
    HostsSet,
    "Two hosts and the subdomains of a third",
    {"hosts": ["api.example.com", "*.example.org", "status.example.net"]},
)
body_example(
    GrantsSet, "A private host and an address", {"grants": ["billing.internal:8443", "10.0.0.7"]}
)


def _with_etag(row: EgressRow) -> Response[EgressView]:
    return Response(row.view, headers={"ETag": row.etag})


class EgressController(Controller):
    path = "/workspaces/{workspace:str}/egress"
    tags = ["egress"]

    @get(
        "/",
        access=Role.VIEWER,
        summary="Read the workspace's egress policy",
        description="The hosts its operations may call (null: any) and its private grants.",
        response_headers=[ETAG_HEADER],
    )
    async def read(self, ws: CurrentWorkspace, conn: DbConn) -> Response[EgressView]:
        return _with_etag(await read_egress(conn, ws))

    @put(
        "/hosts",
        access=Role.OWNER,
        summary="Replace the host list (If-Match required)",
        response_headers=[ETAG_HEADER],
        description=(
            "Host names, `*.domain` (its subdomains) or IP addresses the workspace's "
            "operations may call, redirects included; null allows any host. It narrows "
            "what the operator allows, never widens it. Needs the owner role."
        ),
    )
    async def store_hosts(
        self,
        ws: CurrentWorkspace,
        data: JSONBody[HostsSet],
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> Response[EgressView]:
        return _with_etag(await set_hosts(conn, ws, principal.actor, data.hosts, if_match))

    @put(
        "/grants",
        access=Role.INSTANCE_ADMIN,
        summary="Replace the private grants (instance admins; If-Match required)",
        response_headers=[ETAG_HEADER],
        description=(
            "Private destinations this workspace may reach, written like "
            "`CRANK_UPSTREAM_ALLOWLIST` entries (`host:port`, `ip:port`, `ip`, "
            "`[ipv6]:port`). A private address needs both the operator's allowlist and "
            "a grant. Needs an instance admin token."
        ),
    )
    async def store_grants(
        self,
        ws: CurrentWorkspace,
        data: JSONBody[GrantsSet],
        if_match: IfMatch,
        conn: DbConn,
        principal: Caller,
    ) -> Response[EgressView]:
        return _with_etag(await set_grants(conn, ws, principal.actor, data.grants, if_match))


handlers: list[Any] = [EgressController]
