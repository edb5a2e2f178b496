"""GET /api/v1/workspaces/{workspace}/calls over rows written straight into
call_log: order, filters, paging, bad filters, roles and workspaces."""

from __future__ import annotations

from typing import Any

import pytest

from shared.db import connect
from tests.support.api import Client, auth, make_token

WS = "/api/v1/workspaces/acme"
FIELDS = {
    "id",
    "called_at",
    "agent",
    "key_prefix",
    "request_id",
    "tool",
    "tool_version",
    "outcome",
    "upstream_status",
    "attempts",
    "duration_ms",
    "upstream_ms",
    "approval_id",
    "principal_issuer",
    "principal_subject",
    "principal_name",
    "client_id",
}


@pytest.fixture
async def acme(client: Client, admin_token: str) -> dict[str, str]:
    """Workspaces acme (agents rates and sales, a key each) and other; returns key prefixes."""
    h = auth(admin_token)
    prefixes: dict[str, str] = {}
    for slug in ("acme", "other"):
        created = await client.post("/api/v1/workspaces", json={"slug": slug}, headers=h)
        assert created.status_code == 201, created.text
    for agent in ("rates", "sales"):
        made = await client.post(f"{WS}/agents", json={"slug": agent}, headers=h)
        assert made.status_code == 201, made.text
        key = await client.post(f"{WS}/keys", json={"agent": agent}, headers=h)
        assert key.status_code == 201, key.text
        prefixes[agent] = key.json()["prefix"]
    return prefixes


async def add_calls(database_url: str, workspace: str, agent: str, calls: list[Any]) -> None:
    """``calls``: (tool, outcome, upstream_status) in the order they happened."""
    async with await connect(database_url) as conn:
        for number, (tool, outcome, status) in enumerate(calls):
            await conn.execute(
                """INSERT INTO call_log (called_at, workspace_id, agent_id, key_id, request_id,
                                         tool, tool_version, outcome, upstream_status, attempts,
                                         duration_ms, upstream_ms)
                   SELECT now(), a.workspace_id, a.id, k.id, %s, %s, 1, %s, %s, 1, 2.5, 2.0
                     FROM agents a
                     JOIN workspaces w ON w.id = a.workspace_id
                     JOIN api_keys k ON k.agent_id = a.id
                    WHERE w.slug = %s AND a.slug = %s""",
                (f"req_{agent}_{number}", tool, outcome, status, workspace, agent),
            )
        await conn.commit()


async def page(client: Client, token: str, query: str = "") -> Any:
    response = await client.get(f"{WS}/calls{query}", headers=auth(token))
    assert response.status_code == 200, response.text
    return response.json()


async def test_calls_are_listed_newest_first_with_agent_slug_and_key_prefix(
    client: Client, admin_token: str, database_url: str, acme: dict[str, str]
) -> None:
    await add_calls(database_url, "acme", "rates", [("latest_rate", "ok", 200)])
    await add_calls(database_url, "acme", "sales", [("get_order", "upstream_not_found", 404)])
    await add_calls(database_url, "other", "rates", [])  # no agent there: nothing added

    body = await page(client, admin_token)

    assert body["next_cursor"] is None
    assert [(c["agent"], c["tool"], c["outcome"]) for c in body["items"]] == [
        ("sales", "get_order", "upstream_not_found"),
        ("rates", "latest_rate", "ok"),
    ]
    newest = body["items"][0]
    assert set(newest) == FIELDS
    assert newest["key_prefix"] == acme["sales"]
    assert (newest["upstream_status"], newest["attempts"], newest["tool_version"]) == (404, 1, 1)
    assert newest["request_id"] == "req_sales_0"
    # A key's call names no principal.
    assert [newest[f] for f in ("principal_issuer", "principal_subject", "client_id")] == [
        None,
        None,
        None,
    ]


@pytest.mark.usefixtures("acme")
async def test_filters_by_agent_tool_and_outcome_combine(
    client: Client, admin_token: str, database_url: str
) -> None:
    await add_calls(
        database_url,
        "acme",
        "rates",
        [
            ("latest_rate", "ok", 200),
            ("latest_rate", "invalid_arguments", None),
            ("hist", "ok", 200),
        ],
    )
    await add_calls(database_url, "acme", "sales", [("latest_rate", "ok", 200)])

    def ids(body: Any) -> list[str]:
        return [c["request_id"] for c in body["items"]]

    assert ids(await page(client, admin_token, "?agent=rates")) == [
        "req_rates_2",
        "req_rates_1",
        "req_rates_0",
    ]
    assert ids(await page(client, admin_token, "?tool=latest_rate&outcome=ok")) == [
        "req_sales_0",
        "req_rates_0",
    ]
    assert ids(await page(client, admin_token, "?agent=rates&outcome=invalid_arguments")) == [
        "req_rates_1"
    ]
    assert ids(await page(client, admin_token, "?agent=no-such-agent")) == []


@pytest.mark.usefixtures("acme")
async def test_cursor_pages_through_every_call_once(
    client: Client, admin_token: str, database_url: str
) -> None:
    await add_calls(database_url, "acme", "rates", [("latest_rate", "ok", 200)] * 7)
    seen: list[int] = []
    sizes: list[int] = []
    cursor: str | None = None
    for _ in range(10):
        body = await page(
            client, admin_token, f"?limit=3&cursor={cursor}" if cursor else "?limit=3"
        )
        seen += [c["id"] for c in body["items"]]
        sizes.append(len(body["items"]))
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert sizes == [3, 3, 1]
    assert seen == sorted(seen, reverse=True)
    assert len(set(seen)) == 7


@pytest.mark.usefixtures("acme")
@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?limit=0", "limit"),
        ("?limit=501", "limit"),
        ("?outcome=rate_limited", "outcome"),
        ("?agent=Not_A_Slug", "agent"),
        ("?tool=no%20spaces", "tool"),
        ("?cursor=bm9wZQ", "cursor"),
        ("?cursor=%C3%A9", "cursor"),  # non-ASCII: base64 decoding raises a bare ValueError
        ("?principal_subject=", "principal_subject"),
        ("?principal_subject=" + "s" * 1001, "principal_subject"),
        ("?principal_issuer=" + "i" * 1001, "principal_issuer"),
    ],
)
async def test_bad_filter_values_get_400_naming_the_field(
    client: Client, admin_token: str, query: str, field: str
) -> None:
    response = await client.get(f"{WS}/calls{query}", headers=auth(admin_token))

    assert response.status_code == 400, response.text
    body = response.json()
    assert body["code"] == "validation_failed"
    assert [e["field"] for e in body["errors"]] == [field]


@pytest.mark.usefixtures("acme")
async def test_limit_that_is_not_a_number_gets_400(client: Client, admin_token: str) -> None:
    response = await client.get(f"{WS}/calls?limit=many", headers=auth(admin_token))

    assert response.status_code == 400, response.text
    assert response.json()["code"] == "validation_failed"


@pytest.mark.usefixtures("acme")
async def test_viewer_reads_the_calls_and_another_workspace_gets_404(
    client: Client, database_url: str
) -> None:
    await add_calls(database_url, "acme", "rates", [("latest_rate", "ok", 200)])
    viewer = await make_token(database_url, "viewer", "acme")
    outsider = await make_token(database_url, "owner", "other")

    assert len((await page(client, viewer))["items"]) == 1
    response = await client.get(f"{WS}/calls", headers=auth(outsider))
    assert (response.status_code, response.json()["code"]) == (404, "not_found")


async def test_calls_of_a_deleted_agent_stay_listed_without_its_slug(
    client: Client, admin_token: str, database_url: str, acme: dict[str, str]
) -> None:
    await add_calls(database_url, "acme", "sales", [("get_order", "ok", 200)])
    agent = await client.get(f"{WS}/agents/sales", headers=auth(admin_token))
    deleted = await client.delete(
        f"{WS}/agents/sales", headers=auth(admin_token, agent.headers["etag"])
    )
    assert deleted.is_success, deleted.text

    (call,) = (await page(client, admin_token))["items"]

    assert (call["agent"], call["key_prefix"], call["tool"]) == (None, None, "get_order")


async def add_person_calls(database_url: str, calls: list[tuple[str, str, str | None]]) -> None:
    """Calls of agent rates in acme made with tokens: (issuer, subject, name), in order."""
    async with await connect(database_url) as conn:
        for number, (issuer, subject, name) in enumerate(calls):
            await conn.execute(
                """INSERT INTO call_log (called_at, workspace_id, agent_id, key_id, request_id,
                                         tool, tool_version, outcome, upstream_status, attempts,
                                         duration_ms, upstream_ms, principal_issuer,
                                         principal_subject, principal_name, client_id)
                   SELECT now(), a.workspace_id, a.id, NULL, %s, 'latest_rate', 1, 'ok', 200,
                          1, 2.5, 2.0, %s, %s, %s, 'desk-app'
                     FROM agents a JOIN workspaces w ON w.id = a.workspace_id
                    WHERE w.slug = 'acme' AND a.slug = 'rates'""",
                (f"req_person_{number}", issuer, subject, name),
            )
        await conn.commit()


@pytest.mark.usefixtures("acme")
async def test_calls_made_with_tokens_name_the_principal_and_filter_by_it(
    client: Client, admin_token: str, database_url: str
) -> None:
    idp, other_idp = "https://idp.example.com", "https://other.example.com"
    await add_person_calls(
        database_url,
        [(idp, "dana", "Dana Ng"), (idp, "lee", None), (other_idp, "dana", "Dana at Other")],
    )
    await add_calls(database_url, "acme", "rates", [("latest_rate", "ok", 200)])

    def ids(body: Any) -> list[str]:
        return [c["request_id"] for c in body["items"]]

    everything = await page(client, admin_token)
    by_id = {c["request_id"]: c for c in everything["items"]}
    dana = by_id["req_person_0"]
    assert set(dana) == FIELDS
    assert (dana["principal_issuer"], dana["principal_subject"]) == (idp, "dana")
    assert (dana["principal_name"], dana["client_id"], dana["key_prefix"]) == (
        "Dana Ng",
        "desk-app",
        None,
    )
    assert by_id["req_person_1"]["principal_name"] is None

    assert ids(await page(client, admin_token, "?principal_subject=dana")) == [
        "req_person_2",
        "req_person_0",
    ]
    issuer = "?principal_issuer=https%3A%2F%2Fidp.example.com"
    assert ids(await page(client, admin_token, issuer + "&principal_subject=dana")) == [
        "req_person_0"
    ]
    assert ids(await page(client, admin_token, issuer)) == ["req_person_1", "req_person_0"]
    # Exact match only: no prefix or pattern search.
    assert ids(await page(client, admin_token, "?principal_subject=dan")) == []
    assert ids(await page(client, admin_token, "?principal_subject=%25")) == []
