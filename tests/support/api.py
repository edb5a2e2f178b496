"""The control plane's API as the tests call it: the client type, tokens, headers."""

from __future__ import annotations

import httpx
from litestar import Litestar
from litestar.testing import AsyncTestClient

from control_plane.services.tokens import create_admin_token
from shared.crypto import KeyHasher
from shared.db import connect
from tests.support.db import TEST_SECRET_KEY

Client = AsyncTestClient[Litestar]


async def make_token(
    database_url: str, role: str, workspace: str | None = None, name: str | None = None
) -> str:
    """A new admin token with ``role`` (in ``workspace``, for workspace roles)."""
    async with await connect(database_url) as conn:
        issued = await create_admin_token(
            conn,
            KeyHasher(TEST_SECRET_KEY),
            name=name or f"test-{role}",
            role=role,
            workspace=workspace,
        )
        await conn.commit()
    return issued.token


def auth(token: str, etag: str | None = None) -> dict[str, str]:
    """The Authorization header, and If-Match when an ETag is given."""
    headers = {"Authorization": f"Bearer {token}"}
    if etag is not None:
        headers["If-Match"] = etag
    return headers


async def create_workspace(client: Client, token: str, slug: str) -> None:
    """A new workspace through the API, as an instance admin makes one."""
    response = await client.post("/api/v1/workspaces", json={"slug": slug}, headers=auth(token))
    assert response.status_code == 201, response.text


async def grant_egress(
    client: httpx.AsyncClient, admin_token: str, workspace: str, *grants: str
) -> None:
    """Add private ``grants`` to ``workspace``'s egress policy, as an instance admin
    grants a tenant the internal hosts the operator allowlisted for it."""
    base = f"/api/v1/workspaces/{workspace}/egress"
    current = await client.get(base, headers=auth(admin_token))
    assert current.status_code == 200, current.text
    wanted = [*current.json()["grants"], *grants]
    answer = await client.put(
        f"{base}/grants",
        json={"grants": wanted},
        headers=auth(admin_token, current.headers["etag"]),
    )
    assert answer.status_code == 200, answer.text
