"""Test databases: a real Postgres, a fresh database per test.

``CRANK_TEST_DATABASE_URL`` names a server to use (CI: the machine's
PostgreSQL 15); without it the embedded PostgreSQL 18 starts for the session.
Each run creates its own database and migrates it once; each test starts
from the freshly migrated state (every table truncated).
"""

from __future__ import annotations

import itertools
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psycopg
import psycopg.sql
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from control_plane.app import create_app
from control_plane.services.tokens import create_admin_token
from shared.crypto import KeyHasher
from shared.db import connect
from shared.embedded import EmbeddedPostgres
from shared.metrics import REGISTRY
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


# Tables that migrations fill with rows; the reset between tests restores them.
_SEEDED_TABLES = {"crank_schema_migrations", "catalog_state"}


def _reset(conn: psycopg.Connection[tuple[object, ...]], name: str) -> None:
    """Empty every table the tests may write, as if freshly migrated."""
    conn.execute(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
        "WHERE datname = %s AND pid <> pg_backend_pid()",
        (name,),
    )
    tables = [
        str(row[0])
        for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
            "AND tablename <> 'crank_schema_migrations' ORDER BY tablename"
        )
    ]
    conn.execute(
        psycopg.sql.SQL("TRUNCATE {} RESTART IDENTITY CASCADE").format(
            psycopg.sql.SQL(", ").join([psycopg.sql.Identifier(t) for t in tables])
        )
    )
    conn.execute("INSERT INTO catalog_state DEFAULT VALUES")


@pytest.fixture(scope="session")
def run_database(pg_server_url: str) -> Iterator[str]:
    """This run's own database, migrated once."""
    import asyncio

    name = f"crank_run_{os.getpid()}"
    _admin(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    _admin(pg_server_url, f"CREATE DATABASE {name}")
    url = database_url_for(pg_server_url, name)
    asyncio.run(migrate(url))
    with psycopg.connect(url, autocommit=True) as conn:
        filled = {
            row[0]
            for row in conn.execute("SELECT relname FROM pg_stat_user_tables WHERE n_live_tup > 0")
        }
        assert filled <= _SEEDED_TABLES, f"a migration seeds {filled - _SEEDED_TABLES}: add a reset"
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
def database_url(pg_server_url: str, run_database: str) -> str:
    """The run's database, emptied to its freshly migrated state for this test.

    Truncating takes milliseconds where CREATE DATABASE ... TEMPLATE takes about
    a second; connections a previous test left open are closed first."""
    url = database_url_for(pg_server_url, run_database)
    with psycopg.connect(url, autocommit=True) as conn:
        _reset(conn, run_database)
    return url


@pytest.fixture
def settings(database_url: str) -> Settings:
    return Settings(database_url=database_url, secret_key=TEST_SECRET_KEY)


@pytest.fixture(scope="session")
def app(pg_server_url: str, run_database: str) -> Litestar:
    """One app for the run (building it takes a third of a second); each test's
    client runs its lifespan again, so every test gets a fresh pool."""
    url = database_url_for(pg_server_url, run_database)
    return create_app(Settings(database_url=url, secret_key=TEST_SECRET_KEY))


@pytest.fixture
def hasher() -> KeyHasher:
    return KeyHasher(TEST_SECRET_KEY)


@pytest.fixture
async def client(app: Litestar, database_url: str) -> AsyncIterator[Client]:
    async with AsyncTestClient(app=app) as test_client:
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


def background_failures(task: str) -> float:
    """``crank_background_failures_total`` of one background loop (shared.periodic)."""
    return REGISTRY.get_sample_value("crank_background_failures_total", {"task": task}) or 0.0
