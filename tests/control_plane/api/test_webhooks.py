"""Webhook subscriptions through the admin API: the secret shown once and sealed,
roles, validation of URL, events and format, the audit rows, revoking, and the
delivery log's pages."""

from __future__ import annotations

from typing import Any

import pytest

from shared.crypto import Sealed, SecretBox
from shared.db import connect
from shared.webhook_signing import subscription_associated_data
from tests.support.api import Client, auth, make_token
from tests.support.db import TEST_SECRET_KEY

WS = "/api/v1/workspaces/acme"
HOOKS = f"{WS}/agents/ag/webhooks"
URL = "https://hooks.example.com/services/T0/B0/abcdef"
ALL_EVENTS = [
    "approval.created",
    "approval.decided",
    "approval.completed",
    "approval.failed",
    "approval.expired",
]


@pytest.fixture
async def acme(client: Client, admin_token: str) -> None:
    h = auth(admin_token)
    for slug in ("acme", "other"):
        created = await client.post("/api/v1/workspaces", json={"slug": slug}, headers=h)
        assert created.status_code == 201, created.text
    agent = await client.post(f"{WS}/agents", json={"slug": "ag"}, headers=h)
    assert agent.status_code == 201, agent.text


async def create(client: Client, token: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = await client.post(HOOKS, json=body, headers=auth(token))
    assert answer.status_code == 201, answer.text
    created: dict[str, Any] = answer.json()
    return created


async def audit_rows(database_url: str) -> list[dict[str, Any]]:
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            """SELECT action, resource_type, resource_name, details, actor FROM audit_log
                WHERE action LIKE 'webhook.%%' ORDER BY id"""
        )
        return await cur.fetchall()


@pytest.mark.usefixtures("acme")
async def test_the_secret_is_in_the_creation_answer_once_and_stored_sealed(
    client: Client, admin_token: str, database_url: str
) -> None:
    created = await create(client, admin_token, {"url": URL})
    secret = created.pop("secret")
    assert secret.startswith("whsec_")
    assert created["id"].startswith("whsub_")
    assert (created["url"], created["events"], created["format"]) == (URL, ALL_EVENTS, "standard")
    assert created["revoked_at"] is None
    listed = (await client.get(HOOKS, headers=auth(admin_token))).json()["items"]
    read = (await client.get(f"{HOOKS}/{created['id']}", headers=auth(admin_token))).json()
    assert listed == [created]
    assert read == created
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT * FROM webhook_subscriptions")
        row = await cur.fetchone()
    assert row is not None
    assert secret.encode() not in b"".join(
        str(value).encode() if not isinstance(value, bytes) else value for value in row.values()
    )
    sealed = Sealed(bytes(row["ciphertext"]), bytes(row["nonce"]), row["key_id"])
    box = SecretBox(TEST_SECRET_KEY)
    assert box.open(sealed, subscription_associated_data(created["id"])) == secret


@pytest.mark.usefixtures("acme")
async def test_viewers_read_editors_write_and_other_workspaces_see_nothing(
    client: Client, admin_token: str, database_url: str
) -> None:
    editor = await make_token(database_url, "editor", "acme")
    viewer = await make_token(database_url, "viewer", "acme")
    stranger = await make_token(database_url, "owner", "other")
    created = await create(client, editor, {"url": URL, "events": ["approval.created"]})
    one = f"{HOOKS}/{created['id']}"
    for path in (HOOKS, one, f"{one}/deliveries"):
        assert (await client.get(path, headers=auth(viewer))).status_code == 200
        assert (await client.get(path, headers=auth(stranger))).status_code == 404
    refused = await client.post(HOOKS, json={"url": URL}, headers=auth(viewer))
    assert (refused.status_code, refused.json()["code"]) == (403, "forbidden")
    assert (await client.delete(one, headers=auth(viewer))).status_code == 403
    assert "secret" not in (await client.get(one, headers=auth(viewer))).json()
    assert (await client.delete(one, headers=auth(editor))).status_code == 200


@pytest.mark.usefixtures("acme")
@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://hooks.example.com/x"}, "url"),
        ({"url": "/relative/path"}, "url"),
        ({"url": "https://user:pw@hooks.example.com/x"}, "url"),
        ({"url": "https://hooks.example.com/x#part"}, "url"),
        ({"url": "https://hooks.example.com/a b"}, "url"),
        ({"url": "https://hooks.example.com/" + "x" * 2100}, "url"),
        ({"url": URL, "events": []}, "events"),
        ({"url": URL, "events": ["approval.created", "approval.created"]}, "events"),
        ({"url": URL, "events": ["approval.started"]}, "events[0]"),
        ({"url": URL, "format": "teams"}, "format"),
    ],
)
async def test_invalid_subscriptions_are_refused_naming_the_field(
    client: Client, admin_token: str, body: dict[str, Any], field: str
) -> None:
    answer = await client.post(HOOKS, json=body, headers=auth(admin_token))
    assert answer.status_code == 400, answer.text
    assert answer.json()["code"] == "validation_failed"
    assert field in [error["field"] for error in answer.json()["errors"]]


@pytest.mark.usefixtures("acme")
async def test_unknown_fields_agents_and_ids_are_refused(client: Client, admin_token: str) -> None:
    h = auth(admin_token)
    extra = await client.post(HOOKS, json={"url": URL, "secret": "whsec_x"}, headers=h)
    assert extra.status_code == 400
    nobody = await client.post(f"{WS}/agents/nobody/webhooks", json={"url": URL}, headers=h)
    assert nobody.status_code == 404
    for webhook_id in ("whsub_" + "0" * 24, "nonsense", "whsub_" + "0" * 300):
        assert (await client.get(f"{HOOKS}/{webhook_id}", headers=h)).status_code == 404


@pytest.mark.usefixtures("acme")
async def test_create_and_delete_are_audited_without_the_url_path_or_secret(
    client: Client, admin_token: str, database_url: str
) -> None:
    created = await create(client, admin_token, {"url": URL, "format": "slack"})
    first = await client.delete(f"{HOOKS}/{created['id']}", headers=auth(admin_token))
    again = await client.delete(f"{HOOKS}/{created['id']}", headers=auth(admin_token))
    assert first.status_code == again.status_code == 200
    assert first.json()["revoked_at"] is not None
    assert again.json() == first.json()
    assert (await client.get(HOOKS, headers=auth(admin_token))).json()["items"] == []
    rows = await audit_rows(database_url)
    details = {"agent": "ag", "host": "hooks.example.com", "events": ALL_EVENTS, "format": "slack"}
    assert [(r["action"], r["resource_type"], r["resource_name"], r["details"]) for r in rows] == [
        ("webhook.create", "webhook", created["id"], details),
        ("webhook.delete", "webhook", created["id"], details),
    ]
    assert all(created["secret"] not in str(r) and "abcdef" not in str(r) for r in rows)


@pytest.mark.usefixtures("acme")
async def test_the_delivery_log_pages_newest_first_and_revoking_fails_what_is_unsent(
    client: Client, admin_token: str, database_url: str
) -> None:
    created = await create(client, admin_token, {"url": URL})
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT id, workspace_id FROM agents WHERE slug = 'ag'")
        agent = await cur.fetchone()
        assert agent is not None
        for n in range(5):
            await conn.execute(
                """INSERT INTO webhook_deliveries (webhook_id, subscription_id, workspace_id,
                          agent_id, approval_id, event, payload, status)
                   VALUES (%s, %s, %s, %s, 'approval_x', 'approval.created', '{}', %s)""",
                (
                    f"msg_{n}",
                    created["id"],
                    agent["workspace_id"],
                    agent["id"],
                    "delivered" if n < 3 else "pending",
                ),
            )
        await conn.commit()
    h = auth(admin_token)
    seen: list[str] = []
    cursor: str | None = None
    while True:
        params: dict[str, Any] = {"limit": 2} | ({"cursor": cursor} if cursor else {})
        page = await client.get(f"{HOOKS}/{created['id']}/deliveries", params=params, headers=h)
        assert page.status_code == 200, page.text
        seen += [item["webhook_id"] for item in page.json()["items"]]
        cursor = page.json()["next_cursor"]
        if cursor is None:
            break
    assert seen == ["msg_4", "msg_3", "msg_2", "msg_1", "msg_0"]
    for params in ({"limit": 0}, {"limit": 201}, {"cursor": "bm90LWEtY3Vyc29y"}):
        bad = await client.get(f"{HOOKS}/{created['id']}/deliveries", params=params, headers=h)
        assert bad.status_code == 400, params
    await client.delete(f"{HOOKS}/{created['id']}", headers=h)
    log = (await client.get(f"{HOOKS}/{created['id']}/deliveries", headers=h)).json()["items"]
    assert [(d["status"], d["last_error"]) for d in log] == [
        ("failed", "subscription revoked"),
        ("failed", "subscription revoked"),
        ("delivered", None),
        ("delivered", None),
        ("delivered", None),
    ]
