"""The console's call log over HTTP in process: rows written where the gateways write
them (call_log), filtered, paged, and refused filters marked beside their fields."""

from __future__ import annotations

import re

from shared.principals import PrincipalRecord
from tests.support.api import Client, auth, make_token
from tests.support.approvals import TOOL, publish_shop
from tests.support.call_log import seed_calls
from tests.support.console import sign_in

PAGE = "/ui/w/default/calls"


def _request_ids(html: str) -> list[str]:
    return re.findall(r"<td><code>(req_[0-9a-f]{16})</code></td>", html)


async def test_a_viewer_reads_the_call_log_with_every_column_newest_first(
    client: Client, admin_token: str, database_url: str
) -> None:
    await publish_shop(client, admin_token, 9)
    ids = await seed_calls(database_url, 3)
    await sign_in(client, await make_token(database_url, "viewer", "default"))
    answer = await client.get(PAGE)
    assert answer.status_code == 200
    assert _request_ids(answer.text) == ids[::-1]
    assert '<time datetime="2026-11-30T09:00:00+00:00">2026-11-30 09:00:00</time>' in answer.text
    assert f"<code>{TOOL}</code>" in answer.text
    assert '<span class="badge ok">ok</span>' in answer.text
    assert '<td class="num hide-narrow">201</td>' in answer.text
    assert '12.5 <span class="muted">(7.2)</span>' in answer.text  # duration (upstream) ms


async def test_filters_by_agent_tool_outcome_time_range_and_request_id(
    client: Client, admin_token: str, database_url: str
) -> None:
    await publish_shop(client, admin_token, 9)
    fine = await seed_calls(database_url, 3)
    failed = await seed_calls(database_url, 2, outcome="upstream_unavailable")
    await sign_in(client, admin_token)

    by_outcome = await client.get(PAGE, params={"outcome": "upstream_unavailable"})
    assert _request_ids(by_outcome.text) == failed[::-1]
    assert '<option value="upstream_unavailable" selected>' in by_outcome.text
    by_agent_tool = await client.get(PAGE, params={"agent": "sales", "tool": TOOL})
    assert _request_ids(by_agent_tool.text) == (fine + failed)[::-1]
    assert _request_ids((await client.get(PAGE, params={"agent": "support"})).text) == []
    one = await client.get(PAGE, params={"request_id": fine[1]})
    assert _request_ids(one.text) == [fine[1]]
    # From inclusive, to exclusive; the form's times are UTC.
    window = await client.get(PAGE, params={"from": "2026-11-30T09:01", "to": "2026-11-30T09:03"})
    assert _request_ids(window.text) == [fine[2], fine[1]]


async def test_a_filter_that_cannot_match_is_marked_beside_its_field(
    client: Client, admin_token: str, database_url: str
) -> None:
    await publish_shop(client, admin_token, 9)
    await sign_in(client, admin_token)
    for params, field in (
        ({"outcome": "so-so"}, "outcome"),
        ({"request_id": "r-1"}, "request_id"),
        ({"agent": "Not A Slug"}, "agent"),
        ({"from": "yesterday"}, "from"),
        ({"from": "2026-11-30T10:00", "to": "2026-11-30T09:00"}, "to"),
    ):
        answer = await client.get(PAGE, params=params)
        assert answer.status_code == 400, params
        assert f'id="f-{field}-error"' in answer.text, params
        assert "<table>" not in answer.text


async def test_the_log_pages_with_its_filters_and_htmx_gets_the_fragment(
    client: Client, admin_token: str, database_url: str
) -> None:
    await publish_shop(client, admin_token, 9)
    ids = await seed_calls(database_url, 52)
    await sign_in(client, admin_token)
    first = await client.get(PAGE, params={"outcome": "ok"}, headers={"HX-Request": "true"})
    assert first.status_code == 200
    assert first.text.lstrip().startswith('<div id="log"')
    assert _request_ids(first.text) == ids[::-1][:50]
    older = re.search(r'<a href="([^"]+)" hx-get="[^"]+">Older</a>', first.text)
    assert older is not None
    second = await client.get(older.group(1).replace("&amp;", "&"))
    assert "<html" in second.text  # a link without htmx gets the whole page
    assert _request_ids(second.text) == ids[::-1][50:]
    assert ">Newest</a>" in second.text


async def test_the_api_takes_the_new_filters_too(
    client: Client, admin_token: str, database_url: str
) -> None:
    await publish_shop(client, admin_token, 9)
    ids = await seed_calls(database_url, 3)
    base = "/api/v1/workspaces/default/calls"
    one = await client.get(base, params={"request_id": ids[0]}, headers=auth(admin_token))
    assert [item["request_id"] for item in one.json()["items"]] == [ids[0]]
    window = await client.get(
        base,
        params={"from": "2026-11-30T09:01:00Z", "to": "2026-11-30T10:00:00"},
        headers=auth(admin_token),
    )
    assert [item["request_id"] for item in window.json()["items"]] == ids[:0:-1]
    bad = await client.get(base, params={"request_id": "x"}, headers=auth(admin_token))
    assert bad.status_code == 400
    assert bad.json()["errors"][0]["field"] == "request_id"


async def test_each_call_names_its_caller_and_the_log_filters_by_the_signed_in_subject(
    client: Client, admin_token: str, database_url: str
) -> None:
    await publish_shop(client, admin_token, 9)
    by_key = await seed_calls(database_url, 1)
    dana = PrincipalRecord(
        issuer="https://idp.example.com",
        subject="dana@example.com",
        name="Dana <Ng>",
        client_id="desk",
    )
    by_dana = await seed_calls(database_url, 2, person=dana)
    nameless = PrincipalRecord(issuer="https://idp.example.com", subject="svc-7")
    by_service = await seed_calls(database_url, 1, person=nameless)
    await sign_in(client, admin_token)
    keys = await client.get("/api/v1/workspaces/default/keys", headers=auth(admin_token))
    prefix = next(k["prefix"] for k in keys.json()["items"] if k["kind"] == "agent")

    text = (await client.get(PAGE)).text
    assert _request_ids(text) == (by_key + by_dana + by_service)[::-1]
    # The person by name and subject (escaped), the issuer and client in the tooltip.
    assert (
        text.count(
            '<span title="issuer https://idp.example.com · client desk">'
            "Dana &lt;Ng&gt; (dana@example.com)</span>"
        )
        == 2
    )
    assert '<span title="issuer https://idp.example.com">svc-7</span>' in text
    assert f"key <code>{prefix}</code>" in text

    subject = await client.get(PAGE, params={"principal_subject": "dana@example.com"})
    assert _request_ids(subject.text) == by_dana[::-1]
    assert 'value="dana@example.com"' in subject.text  # the filter stays in its field
    refused = await client.get(PAGE, params={"principal_subject": "x" * 1001})
    assert _request_ids(refused.text) == []
    assert "at most 1000 characters" in refused.text
