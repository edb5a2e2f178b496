"""``crank secrets rotate-key`` against a control plane that keeps a previous key."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from control_plane.cli.client import Client
from shared.crypto import SecretBox, secret_associated_data
from shared.db import connect
from tests.support.cli import Server, crank, run_async
from tests.support.control_plane_server import serve_control_plane
from tests.support.db import TEST_SECRET_KEY

OLD_KEY = "an-older-secret-key-that-is-long-enough-987654"
LOST_KEY = "a-key-nobody-configured-any-more-long-enough-000"


@pytest.fixture(scope="module")
def server(pg_server_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A control plane whose CRANK_SECRET_KEY_PREVIOUS holds the old key."""
    log_dir = tmp_path_factory.mktemp("server")
    with serve_control_plane(
        pg_server_url,
        log_dir,
        f"crank_cli_rotate_{os.getpid()}",
        CRANK_SECRET_KEY_PREVIOUS=OLD_KEY,
    ) as served:
        yield served


def store_sealed(server: Server, workspace: str, name: str, key: str) -> None:
    """A secret of ``workspace`` sealed with ``key``, as an earlier deployment stored it."""

    async def insert() -> None:
        async with await connect(server.database_url) as conn:
            cur = await conn.execute("SELECT id FROM workspaces WHERE slug = %s", (workspace,))
            row = await cur.fetchone()
            assert row is not None
            sealed = SecretBox(key).seal(
                f"value of {name}", secret_associated_data(row["id"], name)
            )
            await conn.execute(
                """INSERT INTO secrets (workspace_id, name, ciphertext, nonce, key_id)
                   VALUES (%s, %s, %s, %s, %s)""",
                (row["id"], name, sealed.ciphertext, sealed.nonce, sealed.key_id),
            )
            await conn.commit()

    run_async(insert())


def test_rotate_key_prints_the_counts_and_exits_0_when_every_value_was_readable(
    server: Server, workspace: str, cli_env: dict[str, str]
) -> None:
    store_sealed(server, workspace, "OLD_TOKEN", OLD_KEY)
    Client(server.url, server.admin_token).put(
        f"/workspaces/{workspace}/secrets/NEW_TOKEN", {"value": "fresh"}
    )

    first = crank("secrets", "rotate-key", env=cli_env)
    second = crank("secrets", "rotate-key", env=cli_env)

    key_id = SecretBox(TEST_SECRET_KEY).current_key_id
    assert (first.returncode, first.stderr) == (0, "")
    assert first.stdout == f"rotated 1, already current 1, unreadable 0 (key id {key_id})\n"
    assert second.returncode == 0
    assert second.stdout == f"rotated 0, already current 2, unreadable 0 (key id {key_id})\n"


def test_rotate_key_names_each_unreadable_value_and_exits_1(
    server: Server, workspace: str, cli_env: dict[str, str]
) -> None:
    store_sealed(server, workspace, "LOST_TOKEN", LOST_KEY)

    result = crank("secrets", "rotate-key", env=cli_env)
    # Rotation is instance-wide: the module's other test must not meet this row.
    Client(server.url, server.admin_token).delete(f"/workspaces/{workspace}/secrets/LOST_TOKEN")

    lost_id = SecretBox(LOST_KEY).current_key_id
    assert result.returncode == 1
    assert "unreadable 1 " in result.stdout
    assert result.stderr == (
        f"unreadable secret LOST_TOKEN in workspace {workspace} (sealed with key id {lost_id})\n"
    )
    assert "value of" not in result.stdout + result.stderr
