from __future__ import annotations

import asyncio

import psycopg

from shared.migrate import available_migrations, migrate
from tests.support.local_commands import crank, crank_env


async def test_concurrent_migrations_on_empty_database_apply_schema_once(
    empty_database_url: str,
) -> None:
    results = await asyncio.gather(*(migrate(empty_database_url) for _ in range(4)))

    applied = [len(result) for result in results]
    assert sorted(applied) == [0, 0, 0, len(available_migrations())]
    with psycopg.connect(empty_database_url) as conn:
        rows = conn.execute("SELECT version FROM crank_schema_migrations ORDER BY version")
        assert [row[0] for row in rows] == [m.version for m in available_migrations()]
        (catalog_rows,) = conn.execute("SELECT count(*) FROM catalog_state").fetchone() or (0,)
        assert catalog_rows == 1


async def test_migrate_twice_applies_nothing_the_second_time(empty_database_url: str) -> None:
    first = await migrate(empty_database_url)
    second = await migrate(empty_database_url)
    assert first
    assert not second


def test_migration_files_are_numbered_without_gaps() -> None:
    versions = [m.version for m in available_migrations()]
    assert versions == list(range(1, len(versions) + 1))


async def test_two_concurrent_crank_migrate_processes_both_succeed(
    empty_database_url: str,
) -> None:
    env = crank_env(empty_database_url)
    first, second = await asyncio.gather(crank("migrate", env=env), crank("migrate", env=env))

    assert (first.code, second.code) == (0, 0), (first.stderr, second.stderr)
    outputs = sorted([first.stdout, second.stdout])
    assert "nothing to apply" in outputs[1]
    assert "applied 0001_core" in outputs[0]


def test_lookups_by_user_and_by_workspace_have_indexes(database_url: str) -> None:
    """Authentication reads roles by user; key listings read keys by workspace."""
    with psycopg.connect(database_url) as conn:
        rows = conn.execute(
            "SELECT tablename, indexdef FROM pg_indexes WHERE tablename IN "
            "('workspace_members', 'api_keys')"
        ).fetchall()
    definitions = {(table, definition.split(" USING ")[1]) for table, definition in rows}
    assert ("workspace_members", "btree (user_id)") in definitions
    assert ("api_keys", "btree (workspace_id)") in definitions


def test_only_whole_file_names_are_migrations() -> None:
    from shared.migrate import _FILENAME

    assert _FILENAME.fullmatch("0001_core.sql")
    assert _FILENAME.fullmatch("0001_core.sql\n") is None
    assert _FILENAME.fullmatch("0001_core.sql.bak") is None
