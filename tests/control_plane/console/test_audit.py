"""The console's audit log over HTTP in process: filters, paging, readable details."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from psycopg.types.json import Jsonb

from shared.db import connect
from tests.support.api import Client, auth, create_workspace, make_token
from tests.support.console import sign_in

PAGE = "/ui/w/audited/audit"
T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)


async def _seed(database_url: str, entries: list[tuple[str, str, str, str]]) -> None:
    """Audit rows of workspace audited, a minute apart from T0: (actor, action, type, name)."""
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT id FROM workspaces WHERE slug = 'audited'")
        workspace = await cur.fetchone()
        assert workspace is not None
        for n, (actor, action, resource_type, name) in enumerate(entries):
            await conn.execute(
                """INSERT INTO audit_log (workspace_id, at, actor, action, resource_type,
                                          resource_name, details)
                   VALUES (%s, %s, %s, %s, %s, %s, %s)""",
                (
                    workspace["id"],
                    T0 + timedelta(minutes=n),
                    actor,
                    action,
                    resource_type,
                    name,
                    Jsonb({"revision": n, "note": f"<i>entry {n}</i>", "tags": ["a", "b"]}),
                ),
            )


def _notes(html: str) -> list[str]:
    """The entries shown, by their details' note (entry n is the n-th seeded)."""
    return re.findall(r"&lt;i&gt;(entry \d+)&lt;/i&gt;", html)


ENTRIES = [
    ("ada (crk_admin_aaaa)", "agent.create", "agent", "sales"),
    ("ada (crk_admin_aaaa)", "agent.publish", "agent", "sales"),
    ("bob (crk_admin_bbbb)", "operation.publish", "operation", "create_order"),
    ("Bob (crk_admin_cccc)", "secret.set", "secret", "SHOP_TOKEN"),
]


async def test_a_viewer_reads_the_audit_log_with_readable_details(
    client: Client, admin_token: str, database_url: str
) -> None:
    await create_workspace(client, admin_token, "audited")
    await _seed(database_url, ENTRIES)
    await sign_in(client, await make_token(database_url, "viewer", "audited"))
    answer = await client.get(PAGE)
    assert answer.status_code == 200
    assert _notes(answer.text) == ["entry 3", "entry 2", "entry 1", "entry 0"]
    assert '<dt>revision</dt><dd><code class="json">3</code></dd>' in answer.text
    assert "<dt>note</dt><dd>&lt;i&gt;entry 3&lt;/i&gt;</dd>" in answer.text  # escaped
    assert "<code>agent.publish</code>" in answer.text
    assert "2026-11-30 09:03:00" in answer.text


async def test_filters_by_action_actor_resource_and_time(
    client: Client, admin_token: str, database_url: str
) -> None:
    await create_workspace(client, admin_token, "audited")
    await _seed(database_url, ENTRIES)
    await sign_in(client, admin_token)

    async def shown(**params: str) -> list[str]:
        answer = await client.get(PAGE, params=params)
        assert answer.status_code == 200, answer.text
        return _notes(answer.text)

    assert await shown(action="agent.publish") == ["entry 1"]
    assert await shown(action="agent") == ["entry 1", "entry 0"]  # the family agent.*
    assert await shown(action="agent.") == []  # exactly that, which is none
    assert await shown(actor="bob") == ["entry 3", "entry 2"]  # a part, any case
    assert await shown(resource="sales") == ["entry 1", "entry 0"]  # by name
    assert await shown(resource="operation") == ["entry 2"]  # by type
    assert await shown(**{"from": "2026-11-30T09:01", "to": "2026-11-30T09:03"}) == [
        "entry 2",
        "entry 1",
    ]
    wrong = await client.get(PAGE, params={"from": "2026-11-30T09:03", "to": "2026-11-30T09:01"})
    assert wrong.status_code == 400
    assert 'id="f-to-error"' in wrong.text


async def test_the_log_pages_and_the_filters_stay_on_the_next_page(
    client: Client, admin_token: str, database_url: str
) -> None:
    await create_workspace(client, admin_token, "audited")
    await _seed(database_url, [("ada (crk_admin_aaaa)", "agent.update", "agent", "s")] * 55)
    await sign_in(client, admin_token)
    first = await client.get(PAGE, params={"action": "agent"}, headers={"HX-Request": "true"})
    assert first.text.lstrip().startswith('<div id="log"')
    assert len(_notes(first.text)) == 50
    older = re.search(r'<a href="([^"]+)" hx-get="[^"]+">Older</a>', first.text)
    assert older is not None
    next_url = older.group(1).replace("&amp;", "&")
    assert "action=agent" in next_url
    second = await client.get(next_url)
    assert _notes(second.text) == [f"entry {n}" for n in range(4, -1, -1)]


async def test_the_api_takes_the_filters_too(
    client: Client, admin_token: str, database_url: str
) -> None:
    await create_workspace(client, admin_token, "audited")
    await _seed(database_url, ENTRIES)
    answer = await client.get(
        "/api/v1/workspaces/audited/audit",
        params={"action": "agent", "actor": "ADA", "from": "2026-11-30T09:01:00Z"},
        headers=auth(admin_token),
    )
    assert answer.status_code == 200
    assert [item["action"] for item in answer.json()["items"]] == ["agent.publish"]
    too_long = await client.get(
        "/api/v1/workspaces/audited/audit", params={"actor": "x" * 201}, headers=auth(admin_token)
    )
    assert too_long.status_code == 400
    assert too_long.json()["errors"][0]["field"] == "actor"
    backwards = await client.get(
        "/api/v1/workspaces/audited/audit",
        params={"from": "2026-11-30T10:00:00Z", "to": "2026-11-30T09:00:00Z"},
        headers=auth(admin_token),
    )
    assert backwards.status_code == 400
    assert backwards.json()["errors"][0]["field"] == "to"  # named as the query parameter
