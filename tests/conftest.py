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
import pytest
from litestar import Litestar
from litestar.testing import AsyncTestClient

from control_plane.app import create_app
from shared.crypto import KeyHasher
from shared.embedded import EmbeddedPostgres
from shared.migrate import migrate
from shared.settings import Settings
from tests.support.api import Client, make_token
from tests.support.db import TEST_SECRET_KEY, admin_sql, database_url_for, reset_database

_counter = itertools.count()


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


# Tables that migrations fill with rows; the reset between tests restores them.
_SEEDED_TABLES = {"crank_schema_migrations", "catalog_state"}


@pytest.fixture(scope="session")
def run_database(pg_server_url: str) -> Iterator[str]:
    """This run's own database, migrated once."""
    import asyncio

    name = f"crank_run_{os.getpid()}"
    admin_sql(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
    admin_sql(pg_server_url, f"CREATE DATABASE {name}")
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
        admin_sql(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def empty_database_url(pg_server_url: str) -> Iterator[str]:
    """A database with no schema at all (for migration tests)."""
    name = f"crank_e_{os.getpid()}_{next(_counter)}"
    admin_sql(pg_server_url, f"CREATE DATABASE {name}")
    try:
        yield database_url_for(pg_server_url, name)
    finally:
        admin_sql(pg_server_url, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


@pytest.fixture
def database_url(pg_server_url: str, run_database: str) -> str:
    """The run's database, emptied to its freshly migrated state for this test.

    Truncating takes milliseconds where CREATE DATABASE ... TEMPLATE takes about
    a second; connections a previous test left open are closed first."""
    url = database_url_for(pg_server_url, run_database)
    with psycopg.connect(url, autocommit=True) as conn:
        reset_database(conn, run_database)
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


@pytest.fixture
async def admin_token(database_url: str) -> str:
    return await make_token(database_url, "admin")
