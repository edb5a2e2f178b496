"""Re-sealing stored secrets under the current key, on a real database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg_pool import AsyncConnectionPool

from control_plane.auth import Workspace
from control_plane.services.key_rotation import (
    SECRETS,
    UnreadableValue,
    read_batch,
    rotate_key,
    write_batch,
)
from control_plane.services.secrets import set_secret
from shared.crypto import Sealed, SecretBox, secret_associated_data
from shared.db import Connection, connect, open_pool
from shared.webhook_signing import subscription_associated_data
from tests.support.db import TEST_SECRET_KEY, wait_until_blocked

OLD_KEY = "an-older-secret-key-that-is-long-enough-987654"
LOST_KEY = "a-key-nobody-configured-any-more-long-enough-000"
OLD_BOX = SecretBox(OLD_KEY)
BOX = SecretBox(TEST_SECRET_KEY, previous=(OLD_KEY,))


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[AsyncConnectionPool[Connection]]:
    opened = await open_pool(database_url, max_size=2)
    try:
        yield opened
    finally:
        await opened.close()


async def store_secret(
    database_url: str, box: SecretBox, ws: Workspace, name: str, value: str
) -> None:
    sealed = box.seal(value, secret_associated_data(ws.id, name))
    async with await connect(database_url) as conn:
        await conn.execute(
            """INSERT INTO secrets (workspace_id, name, ciphertext, nonce, key_id)
               VALUES (%s, %s, %s, %s, %s)""",
            (ws.id, name, sealed.ciphertext, sealed.nonce, sealed.key_id),
        )
        await conn.commit()


async def store_webhook(database_url: str, box: SecretBox, ws: Workspace, webhook_id: str) -> str:
    """A subscription (of a new agent) whose signing secret ``box`` sealed; the secret."""
    secret = f"whsec_secret-of-{webhook_id}"
    sealed = box.seal(secret, subscription_associated_data(webhook_id))
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            """INSERT INTO agents (workspace_id, slug, draft)
               VALUES (%s, %s, '{}') RETURNING id""",
            (ws.id, f"agent-{webhook_id[-4:]}"),
        )
        agent = await cur.fetchone()
        assert agent is not None
        await conn.execute(
            """INSERT INTO webhook_subscriptions (id, workspace_id, agent_id, url, events, format,
                                                  ciphertext, nonce, key_id, created_by)
               VALUES (%s, %s, %s, 'https://hooks.example.com/x', ARRAY['approval.created'],
                       'standard', %s, %s, %s, 'test')""",
            (webhook_id, ws.id, agent["id"], sealed.ciphertext, sealed.nonce, sealed.key_id),
        )
        await conn.commit()
    return secret


async def rows(database_url: str, sql: str) -> list[dict[str, Any]]:
    async with await connect(database_url) as conn:
        cur = await conn.execute(sql)
        return await cur.fetchall()


def opened(box: SecretBox, row: dict[str, Any], associated: bytes) -> str:
    sealed = Sealed(bytes(row["ciphertext"]), bytes(row["nonce"]), row["key_id"])
    return box.open(sealed, associated)


async def catalog_version(database_url: str) -> int:
    found = await rows(database_url, "SELECT version FROM catalog_state")
    return int(found[0]["version"])


async def test_rotation_reseals_old_secrets_and_webhook_secrets_under_the_current_key(
    database_url: str, ws: Workspace, pool: AsyncConnectionPool[Connection]
) -> None:
    await store_secret(database_url, OLD_BOX, ws, "OLD_ONE", "value-one")
    await store_secret(database_url, OLD_BOX, ws, "OLD_TWO", "value-two")
    await store_secret(database_url, BOX, ws, "CURRENT", "value-current")
    webhook_secret = await store_webhook(database_url, OLD_BOX, ws, "whsub_" + "a" * 24)
    current_before = await rows(database_url, "SELECT * FROM secrets WHERE name = 'CURRENT'")
    version = await catalog_version(database_url)

    report = await rotate_key(pool, BOX, "admin (crk_admin_x)", batch_size=1)

    assert (report.rotated, report.already_current, report.unreadable) == (3, 1, [])
    assert report.key_id == BOX.current_key_id
    only_current = SecretBox(TEST_SECRET_KEY)  # the old key may now be dropped
    for row in await rows(database_url, "SELECT * FROM secrets ORDER BY name"):
        assert row["key_id"] == BOX.current_key_id
        value = opened(only_current, row, secret_associated_data(ws.id, row["name"]))
        assert value == {"OLD_ONE": "value-one", "OLD_TWO": "value-two"}.get(
            row["name"], "value-current"
        )
    [webhook] = await rows(database_url, "SELECT * FROM webhook_subscriptions")
    assert opened(only_current, webhook, subscription_associated_data(webhook["id"])) == (
        webhook_secret
    )
    # The current one was not touched; each batch that changed a row bumped the catalog.
    assert await rows(database_url, "SELECT * FROM secrets WHERE name = 'CURRENT'") == (
        current_before
    )
    assert await catalog_version(database_url) == version + 3
    audit = await rows(database_url, "SELECT workspace_id, actor, action, details FROM audit_log")
    assert audit == [
        {
            "workspace_id": None,
            "actor": "admin (crk_admin_x)",
            "action": "secrets.rotate_key",
            "details": {
                "key_id": BOX.current_key_id,
                "rotated": 3,
                "already_current": 1,
                "unreadable": 0,
            },
        }
    ]


async def test_a_second_rotation_rotates_nothing_and_bumps_nothing(
    database_url: str, ws: Workspace, pool: AsyncConnectionPool[Connection]
) -> None:
    await store_secret(database_url, OLD_BOX, ws, "OLD_ONE", "value-one")
    await store_webhook(database_url, OLD_BOX, ws, "whsub_" + "b" * 24)
    first = await rotate_key(pool, BOX, "admin")
    version = await catalog_version(database_url)

    second = await rotate_key(pool, BOX, "admin")

    assert (first.rotated, first.already_current) == (2, 0)
    assert (second.rotated, second.already_current, second.unreadable) == (0, 2, [])
    assert await catalog_version(database_url) == version


async def test_a_value_no_key_opens_is_reported_by_name_and_left_unchanged(
    database_url: str, ws: Workspace, pool: AsyncConnectionPool[Connection]
) -> None:
    lost_box = SecretBox(LOST_KEY)
    await store_secret(database_url, lost_box, ws, "LOST", "value-lost")
    await store_secret(database_url, OLD_BOX, ws, "OLD_ONE", "value-one")
    await store_webhook(database_url, lost_box, ws, "whsub_" + "c" * 24)
    lost_before = await rows(database_url, "SELECT * FROM secrets WHERE name = 'LOST'")

    report = await rotate_key(pool, BOX, "admin")

    assert report.rotated == 1
    assert report.unreadable == [
        UnreadableValue(
            kind="secret", workspace="acme", name="LOST", key_id=lost_box.current_key_id
        ),
        UnreadableValue(
            kind="webhook",
            workspace="acme",
            name="whsub_" + "c" * 24,
            key_id=lost_box.current_key_id,
        ),
    ]
    assert await rows(database_url, "SELECT * FROM secrets WHERE name = 'LOST'") == lost_before
    [audit] = await rows(database_url, "SELECT details FROM audit_log")
    assert audit["details"]["unreadable"] == 2
    assert "value-lost" not in str(audit)


async def test_a_secret_replaced_between_the_read_and_the_write_keeps_the_new_value(
    database_url: str, ws: Workspace
) -> None:
    await store_secret(database_url, OLD_BOX, ws, "RACED", "old-value")
    await store_secret(database_url, OLD_BOX, ws, "CALM", "calm-value")
    async with await connect(database_url) as rotation, await connect(database_url) as writer:
        batch = await read_batch(rotation, BOX, SECRETS, None)
        assert len(batch.resealed) == 2
        # An operator replaces RACED after the rotation read it, before it writes.
        await set_secret(writer, BOX, ws, "operator", "RACED", "new-value")
        await writer.commit()
        written = await write_batch(rotation, SECRETS, batch.resealed)
        await rotation.commit()

    assert written == 1  # CALM only
    found = {r["name"]: r for r in await rows(database_url, "SELECT * FROM secrets")}
    for name, value in (("RACED", "new-value"), ("CALM", "calm-value")):
        assert found[name]["key_id"] == BOX.current_key_id
        assert opened(BOX, found[name], secret_associated_data(ws.id, name)) == value


async def test_a_replace_not_yet_committed_holds_the_rotation_back_and_then_wins(
    database_url: str, ws: Workspace
) -> None:
    await store_secret(database_url, OLD_BOX, ws, "RACED", "old-value")
    async with (
        await connect(database_url) as rotation,
        await connect(database_url) as writer,
        await connect(database_url, autocommit=True) as watcher,
    ):
        batch = await read_batch(rotation, BOX, SECRETS, None)
        await set_secret(writer, BOX, ws, "operator", "RACED", "new-value")  # row locked
        writing = asyncio.create_task(write_batch(rotation, SECRETS, batch.resealed))
        await wait_until_blocked(watcher, rotation.info.backend_pid)
        await writer.commit()
        written = await asyncio.wait_for(writing, timeout=5)
        await rotation.commit()

    assert written == 0
    [row] = await rows(database_url, "SELECT * FROM secrets")
    assert opened(BOX, row, secret_associated_data(ws.id, "RACED")) == "new-value"
