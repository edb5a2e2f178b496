"""The API keys page over HTTP in process: a new key is shown once, in the answer to
its creation, and on no later page; the two kinds stay apart; revoking asks first;
only owners create and revoke."""

from __future__ import annotations

import re

import pytest

from shared.db import connect
from tests.support.api import Client, auth, create_workspace, make_token
from tests.support.console import sign_in

API = "/api/v1/workspaces/acme"
UI = "/ui/w/acme/keys"
KEY = re.compile(r'id="new-key">(crk_(?:agent|approval)_[A-Za-z0-9]+)<')


@pytest.fixture
async def acme(client: Client, admin_token: str) -> None:
    await create_workspace(client, admin_token, "acme")
    created = await client.post(f"{API}/agents", json={"slug": "rates"}, headers=auth(admin_token))
    assert created.status_code == 201, created.text


async def _owner(client: Client, database_url: str) -> str:
    return await sign_in(client, await make_token(database_url, "owner", workspace="acme"))


async def _keys(client: Client, token: str) -> list[dict[str, object]]:
    answer = await client.get(f"{API}/keys", headers=auth(token))
    assert answer.status_code == 200, answer.text
    items: list[dict[str, object]] = answer.json()["items"]
    return items


@pytest.mark.usefixtures("acme")
async def test_a_new_key_is_shown_once_and_on_no_later_page(
    client: Client, admin_token: str, database_url: str, capfd: pytest.CaptureFixture[str]
) -> None:
    csrf = await _owner(client, database_url)
    created = await client.post(
        UI, data={"_csrf": csrf, "agent": "rates", "kind": "agent", "name": "laptop"}
    )
    assert created.status_code == 201, created.text
    assert "location" not in created.headers  # no redirect: the key is in no URL
    found = KEY.search(created.text)
    assert found
    assert found.group(1).startswith("crk_agent_")
    key = found.group(1)
    assert 'data-copy="new-key"' in created.text
    [listed] = await _keys(client, admin_token)
    assert listed["kind"] == "agent"
    assert listed["name"] == "laptop"
    assert key.startswith(str(listed["prefix"]))

    for path in ("/ui/w/acme", UI, "/ui/w/acme/agents", "/ui/w/acme/agents/rates"):
        later = await client.get(path)
        assert later.status_code == 200, path
        assert key not in later.text, path
    assert f"{listed['prefix']}…" in (await client.get(UI)).text
    async with await connect(database_url) as conn:
        cur = await conn.execute("SELECT row_to_json(a)::text AS row FROM audit_log a")
        audit = [row["row"] for row in await cur.fetchall()]
    assert any("key.create" in row for row in audit)
    assert not any(key in row for row in audit)  # the audit log holds the prefix only
    captured = capfd.readouterr()
    assert key not in captured.out + captured.err  # nor does any log line


@pytest.mark.usefixtures("acme")
async def test_an_approval_key_is_created_and_listed_as_its_own_kind(
    client: Client, admin_token: str, database_url: str
) -> None:
    csrf = await _owner(client, database_url)
    page = await client.get(UI)
    assert "never give it to an llm" in page.text.lower()
    assert "nothing to do with confirming a DELETE" in page.text
    created = await client.post(UI, data={"_csrf": csrf, "agent": "rates", "kind": "approval"})
    assert created.status_code == 201
    found = KEY.search(created.text)
    assert found
    assert found.group(1).startswith("crk_approval_")
    # Where the key goes: the gateway's approver inbox of the key's agent.
    assert "<code>https://GATEWAY_HOST/mcp/v1/" in created.text
    assert "/rates/approvals/inbox</code>" in created.text
    [listed] = await _keys(client, admin_token)
    assert listed["kind"] == "approval"


@pytest.mark.usefixtures("acme")
async def test_a_refused_key_says_why_next_to_the_field(
    client: Client, admin_token: str, database_url: str
) -> None:
    csrf = await _owner(client, database_url)
    for data, field in (
        ({"agent": "nobody"}, "agent"),
        ({"agent": "rates", "kind": "admin"}, "kind"),
        ({"agent": "rates", "name": "x" * 201}, "name"),
        ({"agent": "rates", "expires_days": "0"}, "expires_days"),
        ({"agent": "rates", "expires_days": "soon"}, "expires_days"),
    ):
        answer = await client.post(UI, data={"_csrf": csrf, **data})
        assert answer.status_code == 400, data
        assert f'id="{field}-error"' in answer.text, (data, answer.text[-2000:])
        assert KEY.search(answer.text) is None
    assert await _keys(client, admin_token) == []
    expiring = await client.post(UI, data={"_csrf": csrf, "agent": "rates", "expires_days": "30"})
    assert expiring.status_code == 201
    [listed] = await _keys(client, admin_token)
    assert listed["expires_at"] is not None


@pytest.mark.usefixtures("acme")
async def test_revoking_a_key_asks_first(
    client: Client, admin_token: str, database_url: str
) -> None:
    csrf = await _owner(client, database_url)
    await client.post(UI, data={"_csrf": csrf, "agent": "rates"})
    [listed] = await _keys(client, admin_token)
    revoke = f"{UI}/{listed['id']}/revoke"
    assert f'href="{revoke}"' in (await client.get(UI)).text
    confirm = await client.get(revoke)
    assert confirm.status_code == 200
    assert "Revoke key" in confirm.text
    [still] = await _keys(client, admin_token)
    assert still["revoked_at"] is None
    revoked = await client.post(revoke, data={"_csrf": csrf})
    assert revoked.status_code == 303
    assert revoked.headers["location"] == f"{UI}?done=revoked"
    [gone] = await _keys(client, admin_token)
    assert gone["revoked_at"] is not None
    assert "revoked" in (await client.get(UI)).text
    assert (await client.get(f"{UI}/999999/revoke")).status_code == 404


@pytest.mark.usefixtures("acme")
@pytest.mark.parametrize("role", ["viewer", "editor"])
async def test_below_owner_the_page_lists_keys_and_a_forged_write_is_refused(
    client: Client, admin_token: str, database_url: str, role: str
) -> None:
    issued = await client.post(f"{API}/keys", json={"agent": "rates"}, headers=auth(admin_token))
    key_id = issued.json()["id"]
    csrf = await sign_in(client, await make_token(database_url, role, workspace="acme"))
    page = await client.get(UI)
    assert page.status_code == 200
    assert issued.json()["prefix"] in page.text
    assert "Create key" not in page.text
    assert "/revoke" not in page.text
    assert (await client.post(UI, data={"_csrf": csrf, "agent": "rates"})).status_code == 403
    assert (await client.get(f"{UI}/{key_id}/revoke")).status_code == 403
    forged = await client.post(f"{UI}/{key_id}/revoke", data={"_csrf": csrf})
    assert forged.status_code == 403
    [listed] = await _keys(client, admin_token)
    assert listed["revoked_at"] is None
