"""The operations admin API: drafts, If-Match, publishing, versions, diff, rollback, roles."""

from __future__ import annotations

from typing import Any
from unittest.mock import ANY

import psycopg
import pytest

from shared.db import connect
from tests.support.api import Client, auth, make_token
from tests.support.operations import order_spec

WS = "acme"
BASE = f"/api/v1/workspaces/{WS}/operations"


@pytest.fixture
async def editor(client: Client, admin_token: str, database_url: str) -> str:
    """A token with the editor role in a fresh workspace ``acme``."""
    created = await client.post(
        "/api/v1/workspaces", json={"slug": WS, "title": "Acme"}, headers=auth(admin_token)
    )
    assert created.status_code == 201, created.text
    return await make_token(database_url, "editor", WS)


async def create(client: Client, token: str, spec: dict[str, Any] | None = None) -> str:
    """Create an operation; its ETag."""
    response = await client.post(BASE, json=spec or order_spec(), headers=auth(token))
    assert response.status_code == 201, response.text
    return response.headers["etag"]


async def publish(client: Client, token: str, name: str = "get_order") -> dict[str, Any]:
    current = await client.get(f"{BASE}/{name}", headers=auth(token))
    response = await client.post(
        f"{BASE}/{name}/publish", headers=auth(token, current.headers["etag"])
    )
    assert response.status_code in (200, 201), response.text
    body: dict[str, Any] = response.json()
    return body


async def put_draft(client: Client, token: str, spec: dict[str, Any]) -> str:
    current = await client.get(f"{BASE}/{spec['name']}", headers=auth(token))
    response = await client.put(
        f"{BASE}/{spec['name']}", json=spec, headers=auth(token, current.headers["etag"])
    )
    assert response.status_code == 200, response.text
    return response.headers["etag"]


async def fetch_all(database_url: str, query: str, *params: Any) -> list[dict[str, Any]]:
    async with await connect(database_url) as conn:
        cur = await conn.execute(query, params)
        return await cur.fetchall()


# --- create, read, list ----------------------------------------------------------------


async def test_created_operation_reads_back_with_defaults_and_etag(
    client: Client, editor: str
) -> None:
    created = await client.post(BASE, json=order_spec(), headers=auth(editor))
    assert created.status_code == 201, created.text
    assert created.headers["etag"] == '"1.r1"'
    read = await client.get(f"{BASE}/get_order", headers=auth(editor))
    assert read.status_code == 200
    assert read.headers["etag"] == '"1.r1"'
    body = read.json()
    assert body["name"] == "get_order"
    assert body["revision"] == 1
    assert body["latest_version"] is None
    assert body["draft_changed"] is True
    assert body["draft"]["response"]["max_items"] == 50  # defaults are stored
    assert body["draft"]["safety"] == {"approval": False, "confirmation": "auto"}


async def test_list_shows_publish_state_and_pages_by_name(client: Client, editor: str) -> None:
    for name in ("c_op", "a_op", "b_op"):
        await create(client, editor, order_spec(name))
    await publish(client, editor, "a_op")
    first = await client.get(BASE, params={"limit": 2}, headers=auth(editor))
    assert first.status_code == 200
    page = first.json()
    assert [item["name"] for item in page["items"]] == ["a_op", "b_op"]
    assert page["items"][0]["latest_version"] == 1
    assert page["items"][0]["draft_changed"] is False
    assert page["items"][1]["latest_version"] is None
    assert page["items"][1]["draft_changed"] is True
    assert page["items"][1]["title"] == "Get order"
    second = await client.get(
        BASE, params={"limit": 2, "cursor": page["next_cursor"]}, headers=auth(editor)
    )
    assert [item["name"] for item in second.json()["items"]] == ["c_op"]
    assert second.json()["next_cursor"] is None


async def test_list_filters_by_publish_state_and_by_text_and_shows_the_request(
    client: Client, editor: str
) -> None:
    for name in ("ahead_op", "draft_op", "settled_op"):
        await create(client, editor, order_spec(name, title=f"About {name}"))
    await publish(client, editor, "ahead_op")
    await publish(client, editor, "settled_op")
    await put_draft(client, editor, order_spec("ahead_op", title="Changed"))

    async def names(**params: str) -> list[str]:
        response = await client.get(BASE, params=params, headers=auth(editor))
        assert response.status_code == 200, response.text
        return [item["name"] for item in response.json()["items"]]

    assert await names(state="draft") == ["draft_op"]
    assert await names(state="published") == ["settled_op"]
    assert await names(state="ahead") == ["ahead_op"]
    assert await names(q="ABOUT") == ["draft_op", "settled_op"]  # ahead_op's title changed
    assert await names(q="_op", state="ahead") == ["ahead_op"]
    assert await names(q="%") == []
    item = (await client.get(BASE, headers=auth(editor))).json()["items"][0]
    assert (item["method"], item["url"]) == ("GET", "https://api.example.com/orders/{order_id}")
    refused = await client.get(BASE, params={"state": "gone"}, headers=auth(editor))
    assert refused.status_code == 400


async def test_reading_a_missing_operation_is_404(client: Client, editor: str) -> None:
    response = await client.get(f"{BASE}/nope", headers=auth(editor))
    assert response.status_code == 404
    assert response.json()["code"] == "not_found"


async def test_duplicate_name_is_409_already_exists(client: Client, editor: str) -> None:
    await create(client, editor)
    again = await client.post(BASE, json=order_spec(title="Other"), headers=auth(editor))
    assert again.status_code == 409
    assert again.json()["code"] == "already_exists"


async def test_invalid_tool_name_is_refused_with_a_field_error(client: Client, editor: str) -> None:
    response = await client.post(BASE, json=order_spec("get order!"), headers=auth(editor))
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    assert [e["field"] for e in response.json()["errors"]] == ["name"]


@pytest.mark.parametrize(
    "url",
    [
        "https://api.example.com/v1/../admin/{order_id}",
        "https://api.example.com/orders/{order_id}x{..}",
        "https://api.example.com/orders{/order_id}",
        "https://{order_id}.example.com/orders",
    ],
)
async def test_path_template_that_could_escape_its_segment_is_refused(
    client: Client, editor: str, url: str
) -> None:
    spec = order_spec(request={"method": "GET", "url": url})
    response = await client.post(BASE, json=spec, headers=auth(editor))
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    assert "request.url" in [e["field"] for e in response.json()["errors"]]


async def test_delete_with_confirmation_switched_off_is_refused(
    client: Client, editor: str
) -> None:
    spec = order_spec(
        "cancel_order",
        request={"method": "DELETE", "url": "https://api.example.com/orders/{order_id}"},
        safety={"confirmation": False},
    )
    response = await client.post(BASE, json=spec, headers=auth(editor))
    assert response.status_code == 400
    assert [e["field"] for e in response.json()["errors"]] == ["safety.confirmation"]


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [("^(a)\\1$", "invalid escape sequence: \\1"), ("^(?=o)\\w+$", "invalid perl operator: (?=")],
)
async def test_a_pattern_re2_cannot_compile_is_refused_naming_the_field_and_the_reason(
    client: Client, editor: str, pattern: str, reason: str
) -> None:
    spec = order_spec()
    spec["input"]["properties"]["order_id"]["pattern"] = pattern
    response = await client.post(BASE, json=spec, headers=auth(editor))
    assert response.status_code == 400
    body = response.json()
    assert body["code"] == "validation_failed"
    [error] = body["errors"]
    assert error["field"] == "input.properties.order_id.pattern"
    assert reason in error["message"]
    assert "RE2" in error["message"]
    assert (await client.get(BASE, headers=auth(editor))).json()["items"] == []

    spec["input"]["properties"]["order_id"]["pattern"] = "^(a+)+$"  # RE2 runs it in linear time
    assert (await client.post(BASE, json=spec, headers=auth(editor))).status_code == 201


async def test_unknown_field_is_refused_and_nothing_changes(client: Client, editor: str) -> None:
    refused = await client.post(BASE, json=order_spec(colour="red"), headers=auth(editor))
    assert refused.status_code == 400
    assert refused.json()["code"] == "validation_failed"
    assert (await client.get(BASE, headers=auth(editor))).json()["items"] == []

    etag = await create(client, editor)
    nested = order_spec(title="Changed")
    nested["request"]["verb"] = "GET"
    refused = await client.put(f"{BASE}/get_order", json=nested, headers=auth(editor, etag))
    assert refused.status_code == 400
    assert refused.json()["code"] == "validation_failed"
    read = await client.get(f"{BASE}/get_order", headers=auth(editor))
    assert read.headers["etag"] == etag
    assert read.json()["draft"]["title"] == "Get order"


# --- update and optimistic concurrency ---------------------------------------------------


async def test_update_replaces_the_draft_and_bumps_the_etag(client: Client, editor: str) -> None:
    etag = await create(client, editor)
    response = await client.put(
        f"{BASE}/get_order", json=order_spec(title="Order by id"), headers=auth(editor, etag)
    )
    assert response.status_code == 200, response.text
    assert response.headers["etag"] == '"1.r2"'
    assert response.json()["draft"]["title"] == "Order by id"
    assert response.json()["revision"] == 2


async def test_update_with_the_same_draft_changes_nothing(client: Client, editor: str) -> None:
    etag = await create(client, editor)
    response = await client.put(f"{BASE}/get_order", json=order_spec(), headers=auth(editor, etag))
    assert response.status_code == 200
    assert response.headers["etag"] == etag


async def test_update_without_if_match_is_428(client: Client, editor: str) -> None:
    await create(client, editor)
    response = await client.put(f"{BASE}/get_order", json=order_spec(), headers=auth(editor))
    assert response.status_code == 428
    assert response.json()["code"] == "if_match_required"


async def test_second_writer_with_a_stale_etag_gets_409_and_first_write_stays(
    client: Client, editor: str, database_url: str
) -> None:
    await create(client, editor)
    other_editor = await make_token(database_url, "editor", WS, name="second-editor")
    read_a = await client.get(f"{BASE}/get_order", headers=auth(editor))
    read_b = await client.get(f"{BASE}/get_order", headers=auth(other_editor))
    assert read_a.headers["etag"] == read_b.headers["etag"]

    first = await client.put(
        f"{BASE}/get_order",
        json=order_spec(title="First"),
        headers=auth(editor, read_a.headers["etag"]),
    )
    assert first.status_code == 200
    second = await client.put(
        f"{BASE}/get_order",
        json=order_spec(title="Second"),
        headers=auth(other_editor, read_b.headers["etag"]),
    )
    assert second.status_code == 409
    assert second.json()["code"] == "stale_revision"
    final = await client.get(f"{BASE}/get_order", headers=auth(editor))
    assert final.json()["draft"]["title"] == "First"
    assert final.headers["etag"] == first.headers["etag"]


async def test_update_whose_body_names_another_operation_is_refused(
    client: Client, editor: str
) -> None:
    etag = await create(client, editor)
    response = await client.put(
        f"{BASE}/get_order", json=order_spec("other_name"), headers=auth(editor, etag)
    )
    assert response.status_code == 400
    assert response.json()["code"] == "validation_failed"
    assert [e["field"] for e in response.json()["errors"]] == ["name"]


async def test_an_etag_of_a_discarded_operation_does_not_match_the_one_created_again(
    client: Client, editor: str
) -> None:
    old = await create(client, editor)
    discarded = await client.delete(f"{BASE}/get_order/draft", headers=auth(editor, old))
    assert discarded.json()["deleted"] is True  # never published: the operation is gone
    new = await create(client, editor, order_spec(title="Again"))
    assert new != old  # both are revision 1 of an operation called get_order
    headers = auth(editor, old)
    responses = [
        await client.put(f"{BASE}/get_order", json=order_spec(title="Stale"), headers=headers),
        await client.post(f"{BASE}/get_order/publish", headers=headers),
        await client.delete(f"{BASE}/get_order/draft", headers=headers),
    ]
    assert [r.status_code for r in responses] == [409] * 3
    assert {r.json()["code"] for r in responses} == {"stale_revision"}
    read = await client.get(f"{BASE}/get_order", headers=auth(editor))
    assert (read.json()["draft"]["title"], read.json()["latest_version"]) == ("Again", None)


async def test_update_of_a_missing_operation_is_404(client: Client, editor: str) -> None:
    response = await client.put(
        f"{BASE}/get_order", json=order_spec(), headers=auth(editor, '"1.r1"')
    )
    assert response.status_code == 404


# --- publish and versions ----------------------------------------------------------------


async def test_publish_makes_version_one_and_keeps_the_draft_etag(
    client: Client, editor: str
) -> None:
    etag = await create(client, editor)
    response = await client.post(f"{BASE}/get_order/publish", headers=auth(editor, etag))
    assert response.status_code == 201, response.text
    assert response.json() == {
        "name": "get_order",
        "version": 1,
        "changed": True,
        "revision": 1,
        "findings": ANY,  # the linter's warnings: tests/control_plane/api/test_lint.py
    }
    assert response.headers["etag"] == etag
    read = await client.get(f"{BASE}/get_order", headers=auth(editor))
    assert read.json()["latest_version"] == 1
    assert read.json()["draft_changed"] is False


async def test_publish_without_change_makes_no_version(
    client: Client, editor: str, database_url: str
) -> None:
    etag = await create(client, editor)
    await client.post(f"{BASE}/get_order/publish", headers=auth(editor, etag))
    again = await client.post(f"{BASE}/get_order/publish", headers=auth(editor, etag))
    assert again.status_code == 200
    assert again.json()["changed"] is False
    assert again.json()["version"] == 1
    versions = await client.get(f"{BASE}/get_order/versions", headers=auth(editor))
    assert [v["version"] for v in versions.json()["items"]] == [1]
    audit = await fetch_all(
        database_url, "SELECT 1 FROM audit_log WHERE action = 'operation.publish'"
    )
    assert len(audit) == 1


async def test_publish_needs_if_match_and_the_current_revision(client: Client, editor: str) -> None:
    await create(client, editor)
    missing = await client.post(f"{BASE}/get_order/publish", headers=auth(editor))
    assert missing.status_code == 428
    assert missing.json()["code"] == "if_match_required"
    await put_draft(client, editor, order_spec(title="Newer"))
    stale = await client.post(f"{BASE}/get_order/publish", headers=auth(editor, '"1.r1"'))
    assert stale.status_code == 409
    assert stale.json()["code"] == "stale_revision"
    versions = await client.get(f"{BASE}/get_order/versions", headers=auth(editor))
    assert versions.json()["items"] == []


async def test_publish_with_a_missing_secret_is_refused_until_it_exists(
    client: Client, editor: str, database_url: str
) -> None:
    spec = order_spec(
        request={
            "method": "GET",
            "url": "https://api.example.com/orders/{order_id}",
            "auth": {"type": "bearer", "secret": "ORDERS_TOKEN"},
        }
    )
    etag = await create(client, editor, spec)  # a draft may name a secret not yet set
    refused = await client.post(f"{BASE}/get_order/publish", headers=auth(editor, etag))
    assert refused.status_code == 400
    assert refused.json()["code"] == "validation_failed"
    assert [e["field"] for e in refused.json()["errors"]] == ["request.auth.secret"]
    assert (await client.get(f"{BASE}/get_order", headers=auth(editor))).json()[
        "latest_version"
    ] is None

    async with await connect(database_url) as conn:
        await conn.execute(
            """INSERT INTO secrets (workspace_id, name, ciphertext, nonce, key_id)
               SELECT id, 'ORDERS_TOKEN', '\\x00', '\\x00', 'k1' FROM workspaces WHERE slug = %s""",
            (WS,),
        )
        await conn.commit()
    accepted = await client.post(f"{BASE}/get_order/publish", headers=auth(editor, etag))
    assert accepted.status_code == 201


async def test_publish_names_every_missing_secret_of_every_binding(
    client: Client, editor: str, database_url: str
) -> None:
    basic = {"type": "basic", "username": {"secret": "ORDERS_USER"}, "password": {"secret": "PW"}}
    query = {"type": "query", "name": "sig", "secret": "PW"}
    url = "https://api.example.com/orders/{order_id}"
    request = {"method": "GET", "url": url, "auth": [basic, query]}
    etag = await create(client, editor, order_spec(request=request))
    refused = await client.post(f"{BASE}/get_order/publish", headers=auth(editor, etag))
    assert refused.status_code == 400
    assert [e["field"] for e in refused.json()["errors"]] == [
        "request.auth[0].username.secret",
        "request.auth[0].password.secret",
        "request.auth[1].secret",
    ]
    async with await connect(database_url) as conn:
        for name in ("ORDERS_USER", "PW"):
            await conn.execute(
                """INSERT INTO secrets (workspace_id, name, ciphertext, nonce, key_id)
                   SELECT id, %s, '\\x00', '\\x00', 'k1' FROM workspaces WHERE slug = %s""",
                (name, WS),
            )
        await conn.commit()
    accepted = await client.post(f"{BASE}/get_order/publish", headers=auth(editor, etag))
    assert accepted.status_code == 201, accepted.text


@pytest.mark.parametrize(
    ("request_changes", "field"),
    [
        ({"headers": {"X-Api-Key": "demo-key"}}, "request.headers.X-Api-Key"),
        ({"headers": {"X-Partner": "Bearer demo-key"}}, "request.headers.X-Partner"),
        ({"query": {"api_key": "'demo-key'"}}, "request.query.api_key"),
        ({"url": "https://api.example.com/orders/{order_id}?token=demo-key"}, "request.url"),
    ],
)
async def test_a_credential_in_clear_is_refused_with_the_field_and_a_pointer_to_secrets(
    client: Client, editor: str, request_changes: dict[str, Any], field: str
) -> None:
    request = {"method": "GET", "url": "https://api.example.com/orders/{order_id}"}
    spec = order_spec(request={**request, **request_changes})
    response = await client.post(BASE, json=spec, headers=auth(editor))
    assert response.status_code == 400, response.text
    assert response.json()["code"] == "validation_failed"
    [error] = response.json()["errors"]
    assert error["field"] == field
    assert "workspace secret" in error["message"]
    assert "request.auth" in error["message"]
    assert "demo-key" not in response.text  # the refusal does not repeat the credential


async def test_publish_bumps_the_catalog_version(
    client: Client, editor: str, database_url: str
) -> None:
    query = "SELECT version FROM catalog_state"
    etag = await create(client, editor)
    before = (await fetch_all(database_url, query))[0]["version"]
    await client.post(f"{BASE}/get_order/publish", headers=auth(editor, etag))
    after_publish = (await fetch_all(database_url, query))[0]["version"]
    await client.post(f"{BASE}/get_order/publish", headers=auth(editor, etag))
    after_noop = (await fetch_all(database_url, query))[0]["version"]
    assert after_publish > before
    assert after_noop == after_publish


async def test_versions_are_listed_newest_first_and_read_with_their_spec(
    client: Client, editor: str
) -> None:
    await create(client, editor)
    await publish(client, editor)
    await put_draft(client, editor, order_spec(title="Second title"))
    assert (await publish(client, editor))["version"] == 2

    listed = await client.get(f"{BASE}/get_order/versions", headers=auth(editor))
    items = listed.json()["items"]
    assert [v["version"] for v in items] == [2, 1]
    assert items[0]["published_by"].startswith("test-editor")
    first = await client.get(f"{BASE}/get_order/versions/1", headers=auth(editor))
    assert first.status_code == 200
    assert first.json()["version"] == 1
    assert first.json()["spec"]["title"] == "Get order"
    missing = await client.get(f"{BASE}/get_order/versions/9", headers=auth(editor))
    assert missing.status_code == 404
    assert missing.json()["code"] == "not_found"


async def test_published_version_rows_cannot_be_updated(
    client: Client, editor: str, database_url: str
) -> None:
    await create(client, editor)
    await publish(client, editor)
    async with await connect(database_url) as conn:
        with pytest.raises(psycopg.errors.RestrictViolation):
            await conn.execute("UPDATE operation_versions SET published_by = 'mallory'")


# --- diff ------------------------------------------------------------------------------------


async def test_diff_of_a_never_published_operation_is_the_whole_spec(
    client: Client, editor: str
) -> None:
    await create(client, editor)
    response = await client.get(f"{BASE}/get_order/diff", headers=auth(editor))
    assert response.status_code == 200
    body = response.json()
    assert body["latest_version"] is None
    assert len(body["changes"]) == 1
    change = body["changes"][0]
    assert change["path"] == ""
    assert change["before"] is None
    assert change["after"]["name"] == "get_order"


async def test_diff_lists_the_changed_paths_against_the_latest_version(
    client: Client, editor: str
) -> None:
    await create(client, editor)
    await publish(client, editor)
    unchanged = await client.get(f"{BASE}/get_order/diff", headers=auth(editor))
    assert unchanged.json()["changes"] == []

    spec = order_spec(title="Order by id")
    spec["input"]["properties"]["expand"] = {"type": "boolean", "description": "Expand lines"}
    spec["request"]["query"] = {"expand": "expand"}
    await put_draft(client, editor, spec)
    response = await client.get(f"{BASE}/get_order/diff", headers=auth(editor))
    body = response.json()
    assert body["latest_version"] == 1
    changes = {c["path"]: (c["kind"], c["before"], c["after"]) for c in body["changes"]}
    assert changes == {
        "title": ("changed", "Get order", "Order by id"),
        "input.properties.expand": (
            "added",
            None,
            {"type": "boolean", "description": "Expand lines"},
        ),
        "request.query": ("changed", None, {"expand": "expand"}),
    }


async def test_compare_diffs_any_two_versions_or_the_draft(client: Client, editor: str) -> None:
    await create(client, editor)
    await publish(client, editor)
    await put_draft(client, editor, order_spec(title="Second"))
    await publish(client, editor)
    await put_draft(client, editor, order_spec(title="Third"))

    async def compare(**params: str) -> tuple[int, dict[str, Any]]:
        response = await client.get(
            f"{BASE}/get_order/compare", params=params, headers=auth(editor)
        )
        body: dict[str, Any] = response.json()
        return response.status_code, body

    status, body = await compare(before="1", after="2")
    assert status == 200
    assert body == {
        "name": "get_order",
        "before": 1,
        "after": 2,
        "revision": 3,
        "changes": [{"path": "title", "kind": "changed", "before": "Get order", "after": "Second"}],
    }
    status, body = await compare(before="1")  # against the draft
    assert (body["after"], body["changes"][0]["after"]) == ("draft", "Third")
    status, body = await compare()  # the latest version against the draft
    assert (body["before"], body["after"], len(body["changes"])) == (2, "draft", 1)
    status, body = await compare(before="latest", after="0")
    assert status == 400
    assert body["code"] == "validation_failed"
    assert [e["field"] for e in body["errors"]] == ["before", "after"]
    status, body = await compare(before="9")
    assert status == 404
    assert body["code"] == "not_found"


# --- rollback and discard --------------------------------------------------------------------


async def test_rollback_publishes_the_old_spec_as_a_new_version_and_resets_the_draft(
    client: Client, editor: str, database_url: str
) -> None:
    await create(client, editor)
    await publish(client, editor)
    await put_draft(client, editor, order_spec(title="Second title"))
    await publish(client, editor)
    etag = await put_draft(client, editor, order_spec(title="Unpublished edit"))

    response = await client.post(
        f"{BASE}/get_order/versions/1/rollback", headers=auth(editor, etag)
    )
    assert response.status_code == 201, response.text
    assert response.json()["version"] == 3
    assert response.json()["changed"] is True
    assert response.headers["etag"] != etag
    read = await client.get(f"{BASE}/get_order", headers=auth(editor))
    assert read.json()["draft"]["title"] == "Get order"
    assert read.json()["latest_version"] == 3
    assert read.json()["draft_changed"] is False
    assert read.headers["etag"] == response.headers["etag"]
    v3 = await client.get(f"{BASE}/get_order/versions/3", headers=auth(editor))
    v1 = await client.get(f"{BASE}/get_order/versions/1", headers=auth(editor))
    assert v3.json()["spec"] == v1.json()["spec"]
    audit = await fetch_all(
        database_url, "SELECT details FROM audit_log WHERE action = 'operation.rollback'"
    )
    assert [row["details"]["from_version"] for row in audit] == [1]
    assert [row["details"]["version"] for row in audit] == [3]


async def test_rollback_needs_if_match_and_an_existing_version(client: Client, editor: str) -> None:
    etag = await create(client, editor)
    await publish(client, editor)
    missing = await client.post(f"{BASE}/get_order/versions/1/rollback", headers=auth(editor))
    assert missing.status_code == 428
    unknown = await client.post(f"{BASE}/get_order/versions/7/rollback", headers=auth(editor, etag))
    assert unknown.status_code == 404
    stale = await client.post(
        f"{BASE}/get_order/versions/1/rollback", headers=auth(editor, '"1.r0"')
    )
    assert stale.status_code == 409
    assert stale.json()["code"] == "stale_revision"


async def test_rollback_to_the_latest_version_makes_no_version(client: Client, editor: str) -> None:
    etag = await create(client, editor)
    await publish(client, editor)
    response = await client.post(
        f"{BASE}/get_order/versions/1/rollback", headers=auth(editor, etag)
    )
    assert response.status_code == 200
    assert response.json() == {
        "name": "get_order",
        "version": 1,
        "changed": False,
        "revision": 1,
        "findings": ANY,  # the linter's warnings: tests/control_plane/api/test_lint.py
    }


async def test_discard_resets_the_draft_to_the_latest_version(client: Client, editor: str) -> None:
    await create(client, editor)
    await publish(client, editor)
    etag = await put_draft(client, editor, order_spec(title="Throwaway"))
    missing = await client.delete(f"{BASE}/get_order/draft", headers=auth(editor))
    assert missing.status_code == 428
    response = await client.delete(f"{BASE}/get_order/draft", headers=auth(editor, etag))
    assert response.status_code == 200, response.text
    assert response.json()["deleted"] is False
    assert response.json()["latest_version"] == 1
    read = await client.get(f"{BASE}/get_order", headers=auth(editor))
    assert read.json()["draft"]["title"] == "Get order"
    assert read.json()["draft_changed"] is False
    assert read.headers["etag"] == response.headers["etag"] != etag


async def test_discarding_a_never_published_operation_deletes_it(
    client: Client, editor: str
) -> None:
    etag = await create(client, editor)
    response = await client.delete(f"{BASE}/get_order/draft", headers=auth(editor, etag))
    assert response.status_code == 200
    assert response.json()["deleted"] is True
    assert (await client.get(f"{BASE}/get_order", headers=auth(editor))).status_code == 404
    await create(client, editor)  # the name is free again


# --- audit, roles, tenancy -------------------------------------------------------------------


async def test_every_write_is_audited_with_the_actor(
    client: Client, editor: str, database_url: str
) -> None:
    await create(client, editor)
    await put_draft(client, editor, order_spec(title="Second"))
    await publish(client, editor)
    etag = await put_draft(client, editor, order_spec(title="Third"))
    await client.delete(f"{BASE}/get_order/draft", headers=auth(editor, etag))
    await put_draft(client, editor, order_spec(title="Fourth"))
    await publish(client, editor)
    etag = (await client.get(f"{BASE}/get_order", headers=auth(editor))).headers["etag"]
    await client.post(f"{BASE}/get_order/versions/1/rollback", headers=auth(editor, etag))

    rows = await fetch_all(
        database_url,
        """SELECT action, actor, resource_name FROM audit_log
            WHERE resource_type = 'operation' ORDER BY id""",
    )
    assert [row["action"] for row in rows] == [
        "operation.create",
        "operation.update",
        "operation.publish",
        "operation.update",
        "operation.discard_draft",
        "operation.update",
        "operation.publish",
        "operation.rollback",
    ]
    assert all(row["actor"].startswith("test-editor (") for row in rows)
    assert {row["resource_name"] for row in rows} == {"get_order"}


async def test_viewer_can_read_but_not_write(
    client: Client, editor: str, database_url: str
) -> None:
    etag = await create(client, editor)
    await publish(client, editor)
    viewer = await make_token(database_url, "viewer", WS)
    for path in (
        "",
        "/get_order",
        "/get_order/versions",
        "/get_order/versions/1",
        "/get_order/diff",
    ):
        assert (await client.get(f"{BASE}{path}", headers=auth(viewer))).status_code == 200, path

    headers = auth(viewer, etag)
    writes = [
        await client.post(BASE, json=order_spec("new_op"), headers=headers),
        await client.put(f"{BASE}/get_order", json=order_spec(title="x"), headers=headers),
        await client.delete(f"{BASE}/get_order/draft", headers=headers),
        await client.post(f"{BASE}/get_order/publish", headers=headers),
        await client.post(f"{BASE}/get_order/versions/1/rollback", headers=headers),
    ]
    assert [r.status_code for r in writes] == [403] * 5
    assert {r.json()["code"] for r in writes} == {"forbidden"}


async def test_token_of_another_workspace_gets_404_on_every_route(
    client: Client, editor: str, admin_token: str, database_url: str
) -> None:
    etag = await create(client, editor)
    await publish(client, editor)
    await client.post("/api/v1/workspaces", json={"slug": "other"}, headers=auth(admin_token))
    outsider = await make_token(database_url, "owner", "other")
    headers = auth(outsider, etag)
    spec = order_spec()
    responses = [
        await client.get(BASE, headers=headers),
        await client.post(BASE, json=order_spec("new_op"), headers=headers),
        await client.get(f"{BASE}/get_order", headers=headers),
        await client.put(f"{BASE}/get_order", json=spec, headers=headers),
        await client.delete(f"{BASE}/get_order/draft", headers=headers),
        await client.post(f"{BASE}/get_order/publish", headers=headers),
        await client.get(f"{BASE}/get_order/versions", headers=headers),
        await client.get(f"{BASE}/get_order/versions/1", headers=headers),
        await client.get(f"{BASE}/get_order/diff", headers=headers),
        await client.post(f"{BASE}/get_order/versions/1/rollback", headers=headers),
    ]
    assert [r.status_code for r in responses] == [404] * len(responses)
    assert {r.json()["code"] for r in responses} == {"not_found"}
    unchanged = await client.get(f"{BASE}/get_order", headers=auth(editor))
    assert unchanged.headers["etag"] == etag
    assert [
        item["name"] for item in (await client.get(BASE, headers=auth(editor))).json()["items"]
    ] == ["get_order"]
