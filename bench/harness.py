"""What every benchmark here needs before it measures: a database of its own and an
admin API to seed it through.

``create_database`` makes an empty database on ``CRANK_BENCH_DATABASE_URL``
(default the local server) and ``drop_database`` removes it. ``admin_api``
migrates it, makes an admin token and yields ``checked(method, path, ...)``:
a request to the control-plane app run in process (no server, no port), whose
answer must be a success; ``h=`` adds headers such as ``If-Match``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import psycopg
from litestar.testing import AsyncTestClient
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from control_plane.app import create_app
from control_plane.services.tokens import create_admin_token
from shared.crypto import KeyHasher
from shared.db import connect
from shared.migrate import migrate
from shared.settings import Settings

SECRET = "bench-secret-key-that-is-long-enough-0123456789"  # noqa: S105 - throwaway bench db

Checked = Callable[..., Awaitable[Any]]


def database_server() -> str:
    return os.environ.get(
        "CRANK_BENCH_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
    )


def create_database(prefix: str) -> tuple[str, str, str]:
    """A new empty database ``crank_bench_<prefix>_<pid>``: (server URL, name, its URL)."""
    server = database_server()
    name = f"crank_bench_{prefix}_{os.getpid()}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    params = conninfo_to_dict(server)
    params["dbname"] = name
    return server, name, make_conninfo(**params)  # type: ignore[arg-type]


def drop_database(server: str, name: str) -> None:
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


async def admin_token(url: str, secret_key: str = SECRET) -> str:
    """Migrate ``url`` and make an instance admin token in it."""
    await migrate(url)
    async with await connect(url) as conn:
        token = await create_admin_token(conn, KeyHasher(secret_key), name="bench", role="admin")
        await conn.commit()
    return token.token


@contextlib.asynccontextmanager
async def admin_api(
    url: str, secret_key: str = SECRET, *, token: str | None = None
) -> AsyncIterator[Checked]:
    """``checked(method, path, **request_kwargs)`` as the bench's admin (``token``, or a new
    one after migrating); raises past 2xx."""
    h = {"Authorization": f"Bearer {token or await admin_token(url, secret_key)}"}
    app = create_app(Settings(database_url=url, secret_key=secret_key))
    async with AsyncTestClient(app=app) as client:

        async def checked(method: str, path: str, **kwargs: Any) -> Any:
            response = await client.request(method, path, headers=h | kwargs.pop("h", {}), **kwargs)
            if response.status_code >= 300:
                raise RuntimeError(f"{method} {path}: {response.status_code} {response.text}")
            return response

        yield checked


async def grant_loopback(checked: Checked, workspace: str, port: int) -> None:
    """The instance admin grants ``127.0.0.1:port`` to ``workspace``'s egress policy."""
    base = f"/api/v1/workspaces/{workspace}/egress"
    egress = await checked("GET", base)
    await checked(
        "PUT",
        f"{base}/grants",
        json={"grants": [f"127.0.0.1:{port}"]},
        h={"If-Match": egress.headers["etag"]},
    )
