"""Test databases: a real Postgres, a fresh database per test.

``CRANK_TEST_DATABASE_URL`` names a server to use (CI: the machine's
PostgreSQL 15); without it the embedded PostgreSQL 18 starts for the session.
The schema is migrated once into a template; each test gets
``CREATE DATABASE ... TEMPLATE`` (tens of milliseconds).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from control_plane.app import create_app
from control_plane.services.tokens import create_admin_token
from shared.crypto import KeyHasher
from shared.db import connect
from shared.embedded import EmbeddedPostgres
from shared.migrate import migrate
from shared.settings import Settings

TEST_SECRET_KEY = "test-secret-key-that-is-long-enough-0123456789"
_counter = itertools.count()

Client = AsyncTestClient[Litestar]


def database_url_for(server_url: str, name: str) -> str:
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    return make_conninfo(**params)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def pg_server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    url = os.environ.get("CRANK_TEST_DATABASE_URL")
    if url:
        yield url
        return
    server = EmbeddedPostgres(Path(tmp_path_factory.mktemp("pg")) / "data", cleanup="delete")
    try:
        yield server.url()
    finally:
        server.stop()


def _admin(server_url: str, sql: str) -> None:
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql)


@pytest.fixture(scope="session")
def template_database(pg_server_url: str) -> Iterator[str]:
    import asyncio

    name = f"crank_tpl_{os.getpid()}"
    _admin(pg_server_url, f"DROP DATABASE IF EXISTS {name}")
    _admin(pg_server_url, f"CREATE DATABASE {name}")
    asyncio.run(migrate(database_url_for(pg_server_url, name)))
    try:
        yield name
    finally:
        _admin(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def empty_database_url(pg_server_url: str) -> Iterator[str]:
    """A database with no schema at all (for migration tests)."""
    name = f"crank_e_{os.getpid()}_{next(_counter)}"
    _admin(pg_server_url, f"CREATE DATABASE {name}")
    try:
        yield database_url_for(pg_server_url, name)
    finally:
        _admin(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database_url(pg_server_url: str, template_database: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"crank_t_{os.getpid()}_{next(_counter)}"
    _admin(pg_server_url, f"CREATE DATABASE {name} TEMPLATE {template_database}")
    try:
        yield database_url_for(pg_server_url, name)
    finally:
        _admin(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, secret_key=TEST_SECRET_KEY)


@pytest.fixture
def hasher() -> KeyHasher:
    return KeyHasher(TEST_SECRET_KEY)


@pytest.fixture
async def client(settings: Settings) -> AsyncIterator[Client]:
    async with AsyncTestClient(app=create_app(settings)) as test_client:
        yield test_client


async def make_token(
    database_url: str, role: str, workspace: str | None = None, name: str | None = None
) -> str:
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


@pytest.fixture
async def admin_token(database_url: str) -> str:
    return await make_token(database_url, "admin")


def auth(token: str, etag: str | None = None) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}"}
    if etag is not None:
        headers["If-Match"] = etag
    return headers
