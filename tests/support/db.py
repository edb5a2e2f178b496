"""The test databases' names and resets, and waiting on database locks."""

from __future__ import annotations

import asyncio

import psycopg
import psycopg.sql
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from shared.db import Connection

TEST_SECRET_KEY = "test-secret-key-that-is-long-enough-0123456789"


def database_url_for(server_url: str, name: str) -> str:
    params = conninfo_to_dict(server_url)
    params["dbname"] = name
    return make_conninfo(**params)  # type: ignore[arg-type]


def emptied_run_database(server_url: str, name: str) -> str:
    """The URL of the run's database ``name``, emptied first (for module-scoped worlds)."""
    url = database_url_for(server_url, name)
    with psycopg.connect(url, autocommit=True) as conn:
        reset_database(conn, name)
    return url


def admin_sql(server_url: str, sql: str) -> None:
    """Run one statement outside a transaction (CREATE/DROP DATABASE)."""
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(sql)


def reset_database(conn: psycopg.Connection[tuple[object, ...]], name: str) -> None:
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


async def wait_until_blocked(watcher: Connection, pid: int) -> None:
    """Until backend ``pid`` waits on a lock; bounded to two seconds."""
    for _ in range(200):
        cur = await watcher.execute(
            "SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", (pid,)
        )
        row = await cur.fetchone()
        if row is not None and row["wait_event_type"] == "Lock":
            return
        await asyncio.sleep(0.01)
    pytest.fail(f"backend {pid} never waited on a lock")
