"""The console's approvals pages over HTTP in process: the list, one approval, and an
owner's decision, which is the gateway's own statement (shared/approval_decisions.py)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import httpx
from psycopg.types.json import Jsonb

from mcp_gateway.approvals import store
from shared.db import connect
from shared.principals import PrincipalRecord
from tests.support.api import Client, make_token
from tests.support.approval_outcomes import gateway_env
from tests.support.approvals import (
    TOKEN,
    TOOL,
    behind_the_trigger,
    insert_pending,
    new_key,
    publish_shop,
    serve_shop,
    status_is,
)
from tests.support.console import sign_in
from tests.support.gateway import run_gateway, wait_until
from tests.support.tool_calls import Caller

PAGE = "/ui/w/default/approvals"


async def _shop(client: Client, admin_token: str) -> None:
    """Workspace default with create_order behind approval and agent sales (nothing listens
    on the port: no call is ever made)."""
    await publish_shop(client, admin_token, 9)


def _listed_ids(html: str) -> list[str]:
    return re.findall(r'href="/ui/w/default/approvals/(approval_[0-9a-f]{32})"', html)


async def _row(database_url: str, approval_id: str) -> dict[str, object]:
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT status, decided_by, note, agent_id FROM approvals WHERE id = %s",
            (approval_id,),
        )
        row = await cur.fetchone()
    assert row is not None
    return dict(row)


async def test_a_viewer_sees_every_approval_newest_first_and_filters_them(
    client: Client, admin_token: str, database_url: str
) -> None:
    await _shop(client, admin_token)
    older, newer = await insert_pending(database_url, 2)
    async with await connect(database_url, autocommit=True) as conn:
        await conn.execute(
            "UPDATE approvals SET status = 'denied', decided_at = now(), "
            "decided_by = 'crk_approval_x' WHERE id = %s",
            (older,),
        )
    await sign_in(client, await make_token(database_url, "viewer", "default"))

    everything = await client.get(PAGE)
    assert everything.status_code == 200
    assert _listed_ids(everything.text) == [newer, older]
    assert "crk_approval_x" in everything.text

    denied = await client.get(PAGE, params={"status": "denied"})
    assert _listed_ids(denied.text) == [older]
    by_agent_and_tool = await client.get(PAGE, params={"agent": "sales", "tool": TOOL})
    assert _listed_ids(by_agent_and_tool.text) == [newer, older]
    other_agent = await client.get(PAGE, params={"agent": "support"})
    assert _listed_ids(other_agent.text) == []
    assert "No approvals match" in other_agent.text


async def test_a_filter_that_cannot_match_is_marked_beside_its_field(
    client: Client, admin_token: str, database_url: str
) -> None:
    await _shop(client, admin_token)
    await sign_in(client, admin_token)
    answer = await client.get(PAGE, params={"status": "maybe", "tool": "no spaces"})
    assert answer.status_code == 400
    assert 'id="f-status" name="status" aria-invalid="true"' in answer.text
    assert 'id="f-tool-error"' in answer.text
    assert 'value="no spaces"' in answer.text  # the form keeps what was typed
    # htmx swaps no 4xx answer: its fragment comes with 200, the errors inside.
    partial = await client.get(PAGE, params={"tool": "no spaces"}, headers={"HX-Request": "true"})
    assert partial.status_code == 200
    assert 'id="f-tool-error"' in partial.text
    assert "<html" not in partial.text


async def test_the_list_pages_with_a_cursor_and_htmx_gets_the_fragment_only(
    client: Client, admin_token: str, database_url: str
) -> None:
    await _shop(client, admin_token)
    ids = await insert_pending(database_url, 53)
    await sign_in(client, admin_token)
    first = await client.get(PAGE, params={"status": "pending"})
    assert _listed_ids(first.text) == ids[::-1][:50]
    older = re.search(r'<a href="([^"]+)" hx-get="[^"]+">Older</a>', first.text)
    assert older is not None
    next_url = older.group(1).replace("&amp;", "&")
    assert "status=pending" in next_url  # the filters stay on every page
    second = await client.get(next_url, headers={"HX-Request": "true"})
    assert second.status_code == 200
    assert second.text.lstrip().startswith('<div id="log"')
    assert _listed_ids(second.text) == ids[::-1][50:]
    assert ">Older</a>" not in second.text
    # The back button restores a page htmx has no copy of: the whole page comes back.
    restored = await client.get(
        next_url, headers={"HX-Request": "true", "HX-History-Restore-Request": "true"}
    )
    assert "<html" in restored.text
    bad = await client.get(PAGE, params={"cursor": "not-a-cursor"})
    assert bad.status_code == 400
    assert "start from the newest" in bad.text


async def test_the_detail_shows_arguments_times_decider_note_and_result(
    client: Client, admin_token: str, database_url: str
) -> None:
    await _shop(client, admin_token)
    (approval_id,) = await insert_pending(database_url)
    async with await connect(database_url, autocommit=True) as conn:
        for statement, params in (
            (
                "UPDATE approvals SET status = 'approved', decided_at = now(), "
                "decided_by = 'crk_approval_q', note = 'fine <b>by</b> me' WHERE id = %s",
                (approval_id,),
            ),
            (
                "UPDATE approvals SET status = 'executing', attempt = 1, lease_owner = 't', "
                "lease_expires_at = now() + interval '1 minute' WHERE id = %s",
                (approval_id,),
            ),
            (
                "UPDATE approvals SET status = 'completed', completed_at = now(), "
                "response_payload = %s WHERE id = %s",
                (Jsonb({"id": "ord-9", "token": "********"}), approval_id),
            ),
        ):
            await conn.execute(statement, params)
    await sign_in(client, await make_token(database_url, "viewer", "default"))
    answer = await client.get(f"{PAGE}/{approval_id}")
    assert answer.status_code == 200
    text = answer.text
    assert "completed" in text
    assert "crk_approval_q" in text
    assert "fine &lt;b&gt;by&lt;/b&gt; me" in text  # escaped, never markup
    assert "{\n  &#34;item&#34;: &#34;sku-" in text  # indented JSON, escaped
    assert "&#34;id&#34;: &#34;ord-9&#34;" in text
    assert "********" in text  # stored masked, shown as stored
    assert "<dt>Decided</dt>" in text
    assert "<dt>Finished</dt>" in text
    assert 'name="decision"' not in text  # a viewer gets no decision form

    missing = await client.get(f"{PAGE}/approval_{'0' * 32}")
    assert missing.status_code == 404
    malformed = await client.get(f"{PAGE}/not-an-id")
    assert malformed.status_code == 404


async def test_a_workspace_secret_in_arguments_note_or_payload_is_masked_for_everyone(
    client: Client, admin_token: str, database_url: str
) -> None:
    await _shop(client, admin_token)  # the workspace secret SHOP_TOKEN is TOKEN
    shown, denied = await insert_pending(database_url, 2)
    async with await connect(database_url, autocommit=True) as conn:
        await behind_the_trigger(
            conn,
            "UPDATE approvals SET arguments = %s, note = %s, response_payload = %s WHERE id = %s",
            (
                Jsonb({"item": f"sku {TOKEN}", "request_id": "r-1"}),
                f"typed {TOKEN}",
                Jsonb({"echo": TOKEN}),
                shown,
            ),
        )
    await sign_in(client, await make_token(database_url, "viewer", "default"))
    page = await client.get(f"{PAGE}/{shown}")
    assert page.status_code == 200
    assert TOKEN not in page.text
    assert "&#34;item&#34;: &#34;sku ****&#34;" in page.text
    assert "typed ****" in page.text
    assert "&#34;echo&#34;: &#34;****&#34;" in page.text

    # An owner's note is stored, audited and shown masked.
    csrf = await sign_in(client, await make_token(database_url, "owner", "default"))
    answer = await client.post(
        f"{PAGE}/{denied}/decide",
        data={"decision": "deny", "note": f"no, {TOKEN} leaked", "_csrf": csrf},
    )
    assert answer.status_code == 303
    assert (await _row(database_url, denied))["note"] == "no, **** leaked"
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT details FROM audit_log WHERE resource_name = %s", (denied,)
        )
        (audited,) = await cur.fetchall()
    assert audited["details"]["note"] == "no, **** leaked"
    assert TOKEN not in (await client.get(f"{PAGE}/{denied}")).text


async def test_an_owner_approves_with_a_note_audited_and_seen_by_the_gateway(
    client: Client, admin_token: str, database_url: str
) -> None:
    await _shop(client, admin_token)
    (approval_id,) = await insert_pending(database_url)
    owner = await make_token(database_url, "owner", "default", name="olga")
    csrf = await sign_in(client, owner)
    detail = await client.get(f"{PAGE}/{approval_id}")
    assert 'name="decision" value="approve"' in detail.text

    async with await connect(database_url, autocommit=True) as listener:
        await listener.execute(f"LISTEN {store.CHANNEL}")
        answer = await client.post(
            f"{PAGE}/{approval_id}/decide",
            data={"decision": "approve", "note": "ok for sku", "_csrf": csrf},
        )
        assert answer.status_code == 303
        assert answer.headers["location"] == f"{PAGE}/{approval_id}"
        woken = await asyncio.wait_for(anext(listener.notifies()), timeout=5)
        assert woken.channel == store.CHANNEL  # the gateways' workers are woken

    row = await _row(database_url, approval_id)
    assert row["status"] == "approved"
    assert row["note"] == "ok for sku"
    decided_by = str(row["decided_by"])
    assert re.fullmatch(r"console:olga \(crk_admin_[A-Za-z0-9]+\)", decided_by), decided_by
    assert owner not in decided_by  # the prefix only, never the token

    async with await connect(database_url, autocommit=True) as conn:
        seen = await store.get(conn, int(str(row["agent_id"])), approval_id)
        cur = await conn.execute(
            "SELECT actor, action, resource_type, details FROM audit_log WHERE resource_name = %s",
            (approval_id,),
        )
        audited = await cur.fetchall()
    assert seen is not None
    assert seen.status == "approved"
    assert seen.decided_by == decided_by
    assert len(audited) == 1
    assert audited[0]["action"] == "approval.approved"
    assert audited[0]["resource_type"] == "approval"
    assert audited[0]["actor"].startswith("olga (crk_admin_")
    assert audited[0]["details"]["note"] == "ok for sku"
    assert audited[0]["details"]["agent"] == "default/sales"

    shown = await client.get(f"{PAGE}/{approval_id}")
    assert decided_by in shown.text
    assert 'name="decision"' not in shown.text  # decided: nothing left to decide


async def test_an_owner_denies_and_a_second_decision_gets_409_with_the_status(
    client: Client, admin_token: str, database_url: str
) -> None:
    await _shop(client, admin_token)
    (approval_id,) = await insert_pending(database_url)
    csrf = await sign_in(client, await make_token(database_url, "owner", "default"))
    denied = await client.post(
        f"{PAGE}/{approval_id}/decide", data={"decision": "deny", "note": "", "_csrf": csrf}
    )
    assert denied.status_code == 303
    assert (await _row(database_url, approval_id))["status"] == "denied"

    again = await client.post(
        f"{PAGE}/{approval_id}/decide", data={"decision": "approve", "_csrf": csrf}
    )
    assert again.status_code == 409
    assert "<code>not_pending</code>" in again.text
    assert "is denied, not pending" in again.text
    assert (await _row(database_url, approval_id))["status"] == "denied"


async def test_a_decision_on_a_row_past_its_time_expires_it_and_says_so(
    client: Client, admin_token: str, database_url: str
) -> None:
    await _shop(client, admin_token)
    (approval_id,) = await insert_pending(database_url, expires_in_s=-5)
    csrf = await sign_in(client, admin_token)
    shown = await client.get(f"{PAGE}/{approval_id}")
    assert "past its time" in shown.text
    assert 'name="decision"' not in shown.text
    answer = await client.post(
        f"{PAGE}/{approval_id}/decide", data={"decision": "approve", "_csrf": csrf}
    )
    assert answer.status_code == 409
    assert "is expired, not pending" in answer.text
    assert (await _row(database_url, approval_id))["status"] == "expired"


async def test_an_editor_or_a_viewer_may_not_decide(
    client: Client, admin_token: str, database_url: str
) -> None:
    await _shop(client, admin_token)
    (approval_id,) = await insert_pending(database_url)
    for role in ("editor", "viewer"):
        client.cookies.clear()
        csrf = await sign_in(client, await make_token(database_url, role, "default"))
        detail = await client.get(f"{PAGE}/{approval_id}")
        assert 'name="decision"' not in detail.text  # the page hides it ...
        answer = await client.post(  # ... and the route refuses it anyway
            f"{PAGE}/{approval_id}/decide", data={"decision": "approve", "_csrf": csrf}
        )
        assert answer.status_code == 403, role
        assert "<code>forbidden</code>" in answer.text
    assert (await _row(database_url, approval_id))["status"] == "pending"


async def test_a_decision_without_the_csrf_token_or_with_a_bad_note_changes_nothing(
    client: Client, admin_token: str, database_url: str
) -> None:
    await _shop(client, admin_token)
    (approval_id,) = await insert_pending(database_url)
    csrf = await sign_in(client, admin_token)
    tokenless = await client.post(f"{PAGE}/{approval_id}/decide", data={"decision": "approve"})
    assert tokenless.status_code == 403
    too_long = await client.post(
        f"{PAGE}/{approval_id}/decide",
        data={"decision": "approve", "note": "n" * 2001, "_csrf": csrf},
    )
    assert too_long.status_code == 400
    assert 'id="f-note-error"' in too_long.text
    no_button = await client.post(
        f"{PAGE}/{approval_id}/decide", data={"decision": "maybe", "_csrf": csrf}
    )
    assert no_button.status_code == 400
    assert (await _row(database_url, approval_id))["status"] == "pending"


async def test_a_call_a_gateway_held_for_approval_runs_once_an_owner_approves_it_here(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    async with serve_shop() as shop:
        await publish_shop(client, admin_token, shop.port)
        agent_key = await new_key(client, admin_token, "sales", "agent")
        approval_key = await new_key(client, admin_token, "sales", "approval")
        async with (
            run_gateway(database_url, tmp_path, extra_env=gateway_env(shop)) as gateway,
            httpx.AsyncClient(base_url=gateway.url, timeout=20) as http,
        ):
            caller = Caller(http, "/mcp/v1/default/sales", agent_key)
            asked = await caller.call("modern", TOOL, {"item": "sku-7", "request_id": "r-7"})
            approval_id = asked["structuredContent"]["approval_id"]
            csrf = await sign_in(client, admin_token)
            listed = await client.get(PAGE, params={"status": "pending"})
            assert _listed_ids(listed.text) == [approval_id]

            decided = await client.post(
                f"{PAGE}/{approval_id}/decide",
                data={"decision": "approve", "note": "go", "_csrf": csrf},
            )
            assert decided.status_code == 303
            await wait_until(lambda: status_is(database_url, approval_id, "completed"))
            assert [seen.body["item"] for seen in shop.seen] == ["sku-7"]

            # The gateway's approval endpoint reads the console's decision, and refuses
            # to decide it again (the same statement, the same 409).
            key = {"Authorization": f"Bearer {approval_key}"}
            endpoint = f"/v1/default/sales/approvals/{approval_id}"
            record = (await http.get(endpoint, headers=key)).json()
            assert record["decided_by"].startswith("console:")
            assert record["note"] == "go"
            again = await http.post(f"{endpoint}/deny", json={"approve": "no"}, headers=key)
            assert again.status_code == 409
            assert again.json()["code"] == "not_pending"

        shown = await client.get(f"{PAGE}/{approval_id}")
        assert "&#34;item&#34;: &#34;sku-7&#34;" in shown.text  # the selected result
        calls = await client.get("/ui/w/default/calls", params={"outcome": "ok"})
        assert f'href="/ui/w/default/approvals/{approval_id}"' in calls.text  # the worker's run


async def test_the_list_and_the_detail_say_who_asked_a_person_or_a_key(
    client: Client, admin_token: str, database_url: str
) -> None:
    await _shop(client, admin_token)
    dana = PrincipalRecord(
        issuer="https://idp.example.com",
        subject="dana@example.com",
        name="Dana Ng",
        client_id="desk",
    )
    (by_dana,) = await insert_pending(database_url, person=dana)
    by_key, by_nobody = await insert_pending(database_url, 2)
    async with await connect(database_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT id, prefix FROM api_keys WHERE kind = 'agent' ORDER BY id LIMIT 1"
        )
        key = await cur.fetchone()
        assert key is not None
        await behind_the_trigger(
            conn, "UPDATE approvals SET key_id = %s WHERE id = %s", (key["id"], by_key)
        )
    prefix = key["prefix"]
    await sign_in(client, await make_token(database_url, "viewer", "default"))

    listed = (await client.get(PAGE)).text
    person = (
        '<span title="issuer https://idp.example.com · client desk">'
        "Dana Ng (dana@example.com)</span>"
    )
    assert person in listed
    assert f"key <code>{prefix}</code>" in listed
    assert '<span class="muted">unknown</span>' in listed  # a row that names neither

    detail = (await client.get(f"{PAGE}/{by_dana}")).text
    assert f"<dt>Asked by</dt><dd>{person}</dd>" in detail
    keyed = (await client.get(f"{PAGE}/{by_key}")).text
    assert f"<dt>Asked by</dt><dd>key <code>{prefix}</code></dd>" in keyed
    assert by_nobody in listed
