"""``POST /api/v1/secrets/rotate-key``: instance admins only."""

from __future__ import annotations

from shared.crypto import SecretBox, secret_associated_data
from shared.db import connect
from tests.support.api import Client, auth, create_workspace, make_token
from tests.support.db import TEST_SECRET_KEY

ROTATE = "/api/v1/secrets/rotate-key"
UNKNOWN_KEY = "a-key-this-control-plane-does-not-know-123456"


async def test_a_workspace_owner_is_refused_rotating_the_key(
    client: Client, admin_token: str, database_url: str
) -> None:
    await create_workspace(client, admin_token, "acme")
    owner = await make_token(database_url, "owner", "acme")

    refused = await client.post(ROTATE, headers=auth(owner))

    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT count(*) AS n FROM audit_log WHERE action LIKE 'secrets.%%'"
        )
        assert await cur.fetchone() == {"n": 0}


async def test_an_instance_admin_gets_the_counts_and_the_unreadable_values_by_name(
    client: Client, admin_token: str, database_url: str
) -> None:
    await create_workspace(client, admin_token, "acme")
    stored = await client.put(
        "/api/v1/workspaces/acme/secrets/CURRENT", json={"value": "v"}, headers=auth(admin_token)
    )
    assert stored.status_code == 201, stored.text
    unknown = SecretBox(UNKNOWN_KEY)
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT id FROM workspaces WHERE slug = 'acme'")
        ws = await cur.fetchone()
        assert ws is not None
        sealed = unknown.seal("lost", secret_associated_data(ws["id"], "LOST"))
        await conn.execute(
            """INSERT INTO secrets (workspace_id, name, ciphertext, nonce, key_id)
               VALUES (%s, 'LOST', %s, %s, %s)""",
            (ws["id"], sealed.ciphertext, sealed.nonce, sealed.key_id),
        )
        await conn.commit()

    answer = await client.post(ROTATE, headers=auth(admin_token))

    assert answer.status_code == 200, answer.text
    assert answer.json() == {
        "rotated": 0,
        "already_current": 1,
        "unreadable": [
            {"kind": "secret", "workspace": "acme", "name": "LOST", "key_id": sealed.key_id}
        ],
        "key_id": SecretBox(TEST_SECRET_KEY).current_key_id,
    }
