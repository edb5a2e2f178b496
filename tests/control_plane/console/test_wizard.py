"""The operation wizard through the in-process client: each step saves into the draft
with its revision, refuses bad values next to the field, and refuses viewers."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Iterator
from html import unescape
from typing import Any

import pytest
from litestar.testing import AsyncTestClient

from control_plane.app import create_app
from shared.settings import Settings
from tests.support.api import Client, auth, create_workspace, grant_egress, make_token
from tests.support.console import csrf_of, sign_in
from tests.support.db import TEST_SECRET_KEY
from tests.support.threaded_http import JsonHandler, ThreadedServer, serve_threaded

WS = "acme"
NEW = f"/ui/w/{WS}/operations/new"
API = f"/api/v1/workspaces/{WS}/operations"
_FIELD_ERROR = re.compile(r'data-field="([^"]+)"[^>]*>([^<]+)<')


def edit(name: str, step: str = "") -> str:
    return f"/ui/w/{WS}/operations/{name}/edit" + (f"/{step}" if step else "")


def field_errors(html: str) -> dict[str, str]:
    """The error shown beside each field of a page, by the field's form name."""
    return {field: message.strip() for field, message in _FIELD_ERROR.findall(html)}


def etag_of(html: str) -> str:
    found = re.search(r'name="etag" value="([^"]+)"', html)
    assert found, "the page carries no revision"
    return found.group(1).replace("&#34;", '"')


def selected_result(html: str) -> Any:
    """The selected result a try-it preview shows, decoded."""
    found = re.search(r'<pre class="selected"[^>]*data-error="false">([^<]*)</pre>', html)
    assert found, "the page shows no selected result"
    return json.loads(unescape(found.group(1)))


def row_keys(html: str) -> list[str]:
    return re.findall(r'name="row" value="([^"]+)"', html)


def request_form(**changes: str) -> dict[str, str]:
    form = {
        "name": "get_order",
        "title": "Get an order",
        "description": "Reads one order by its id. Use when the user asks about an order.",
        "method": "GET",
        "url": "https://api.example.com/orders/{order_id}",
        "query": "",
        "headers": "",
        "body": "",
        "auth_type": "none",
        "auth_secret": "",
        "auth_name": "",
        "action": "next",
    }
    return {**form, **changes}


@pytest.fixture
async def editor(client: Client, admin_token: str, database_url: str) -> str:
    """The workspace, an editor signed in to the console; returns the CSRF token."""
    await create_workspace(client, admin_token, WS)
    token = await make_token(database_url, "editor", WS, name="erin")
    return await sign_in(client, token)


async def create_order(client: Client, csrf: str, **changes: str) -> None:
    answer = await client.post(NEW, data={"_csrf": csrf, **request_form(**changes)})
    assert answer.status_code == 303, answer.text


async def draft(client: Client, admin_token: str, name: str = "get_order") -> dict[str, Any]:
    answer = await client.get(f"{API}/{name}", headers=auth(admin_token))
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


async def step_page(client: Client, name: str, step: str) -> str:
    answer = await client.get(edit(name, step))
    assert answer.status_code == 200, answer.text
    return answer.text


# --- step 1: the request ------------------------------------------------------------------


async def test_the_request_step_creates_the_draft_with_path_variables_as_required_parameters(
    client: Client, editor: str, admin_token: str
) -> None:
    page = await client.get(NEW)
    assert page.status_code == 200
    assert 'name="_csrf"' in page.text

    answer = await client.post(NEW, data={"_csrf": editor, **request_form(query="status = status")})
    assert answer.status_code == 303
    assert answer.headers["location"] == edit("get_order", "parameters")

    stored = await draft(client, admin_token)
    assert stored["draft"]["request"]["url"] == "https://api.example.com/orders/{order_id}"
    assert stored["draft"]["request"]["query"] == {"status": "status"}
    assert stored["draft"]["input"]["required"] == ["order_id"]
    assert stored["draft"]["input"]["properties"]["order_id"]["type"] == "string"
    assert stored["latest_version"] is None


async def test_the_request_step_shows_every_error_beside_its_field_and_saves_nothing(
    client: Client, editor: str, admin_token: str
) -> None:
    answer = await client.post(
        NEW,
        data={
            "_csrf": editor,
            **request_form(
                name="get order!",
                description=" ",
                url="ftp://api.example.com/x",
                query="status",
                auth_type="bearer",
                auth_secret="not-a-secret",
            ),
        },
    )
    assert answer.status_code == 400
    assert set(field_errors(answer.text)) == {"name", "description", "url", "query", "auth_secret"}
    assert 'aria-invalid="true"' in answer.text
    assert f'action="{NEW}"' in answer.text  # sent again, it still creates
    assert 'value="get order!"' in answer.text  # what was typed stays
    listed = await client.get(API, headers=auth(admin_token))
    assert listed.json()["items"] == []


async def test_a_name_already_taken_is_refused_at_the_name_field(
    client: Client, editor: str
) -> None:
    await create_order(client, editor)
    again = await client.post(NEW, data={"_csrf": editor, **request_form()})
    assert again.status_code == 409
    assert set(field_errors(again.text)) == {"name"}


async def test_auth_offers_the_workspace_secret_names_and_never_their_values(
    client: Client, editor: str, admin_token: str
) -> None:
    stored = await client.put(
        f"/api/v1/workspaces/{WS}/secrets/shop_token",
        json={"value": "s3cr3t-value-never-shown"},
        headers=auth(admin_token),
    )
    assert stored.is_success, stored.text
    page = await client.get(NEW)
    assert '<option value="shop_token">' in page.text
    assert "s3cr3t-value-never-shown" not in page.text

    await create_order(client, editor, auth_type="bearer", auth_secret="shop_token")
    assert (await draft(client, admin_token))["draft"]["request"]["auth"]["secret"] == "shop_token"
    assert "s3cr3t-value-never-shown" not in await step_page(client, "get_order", "request")


async def test_an_existing_operation_is_edited_and_keeps_its_name(
    client: Client, editor: str, admin_token: str
) -> None:
    await create_order(client, editor)
    page = await step_page(client, "get_order", "request")
    assert "Reads one order by its id." in page
    answer = await client.post(
        edit("get_order", "request"),
        data={
            "_csrf": editor,
            "etag": etag_of(page),
            **request_form(name="renamed", description="Reads one order. Use for order questions."),
        },
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == edit("get_order", "parameters")
    stored = await draft(client, admin_token)
    assert stored["name"] == "get_order"
    assert stored["draft"]["description"] == "Reads one order. Use for order questions."
    assert stored["revision"] == 2


# --- step 2: parameters --------------------------------------------------------------------


async def test_parameter_rows_build_the_input_schema_with_the_advanced_keywords(
    client: Client, editor: str, admin_token: str
) -> None:
    await create_order(client, editor)
    page = await step_page(client, "get_order", "parameters")
    assert 'id="path-variables"' in page
    (order_key,) = row_keys(page)
    added = await client.post(
        edit("get_order", "parameters"),
        data={"_csrf": editor, "etag": etag_of(page), "row": order_key, "action": "add"},
    )
    assert added.status_code == 200  # a plain post adds the row without saving
    new_key = next(key for key in row_keys(added.text) if key != order_key)
    answer = await client.post(
        edit("get_order", "parameters"),
        data={
            "_csrf": editor,
            "etag": etag_of(page),
            "row": [order_key, new_key],
            f"{order_key}.name": "order_id",
            f"{order_key}.type": "integer",
            f"{order_key}.required": "on",
            f"{order_key}.description": "The order's number.",
            f"{order_key}.min": "1",
            f"{new_key}.name": "status",
            f"{new_key}.type": "string",
            f"{new_key}.description": "Only orders in this state.",
            f"{new_key}.enum": "open, shipped",
            "extra": '{"additionalProperties": false}',
            "action": "next",
        },
    )
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == edit("get_order", "response")
    schema = (await draft(client, admin_token))["draft"]["input"]
    assert schema == {
        "type": "object",
        "properties": {
            "order_id": {"type": "integer", "description": "The order's number.", "minimum": 1},
            "status": {
                "type": "string",
                "description": "Only orders in this state.",
                "enum": ["open", "shipped"],
            },
        },
        "required": ["order_id"],
        "additionalProperties": False,
    }
    again = await step_page(client, "get_order", "parameters")
    assert 'value="open, shipped"' in again
    assert "additionalProperties" in again


async def test_parameter_errors_are_shown_at_the_row_field_and_a_dropped_path_variable_is_named(
    client: Client, editor: str, admin_token: str
) -> None:
    await create_order(client, editor)
    page = await step_page(client, "get_order", "parameters")
    answer = await client.post(
        edit("get_order", "parameters"),
        data={
            "_csrf": editor,
            "etag": etag_of(page),
            "row": ["r1", "r2"],
            "r1.name": "limit",
            "r1.type": "integer",
            "r1.min": "many",
            "r1.enum": "1, two",
            "r2.name": "flag",
            "r2.type": "boolean",
            "r2.pattern": "^x$",
            "extra": "[1, 2]",
        },
    )
    assert answer.status_code == 400
    assert set(field_errors(answer.text)) == {"r1.min", "r1.enum", "r2.pattern", "extra"}
    assert "path variable &#39;order_id&#39; is not declared in input" in answer.text
    assert (await draft(client, admin_token))["revision"] == 1


async def test_the_rows_fragment_adds_and_removes_a_row_for_htmx(
    client: Client, editor: str
) -> None:
    await create_order(client, editor)
    page = await step_page(client, "get_order", "parameters")
    (key,) = row_keys(page)
    headers = {"HX-Request": "true", "X-CSRF-Token": editor}
    url = f"/ui/w/{WS}/operations/get_order/wizard/parameter-rows"
    added = await client.post(url, data={"row": key, "action": "add"}, headers=headers)
    assert added.status_code == 200
    assert added.text.lstrip().startswith('<div id="param-rows">')
    assert len(row_keys(added.text)) == 2
    removed = await client.post(
        url, data={"row": row_keys(added.text), "action": f"remove:{key}"}, headers=headers
    )
    assert key not in row_keys(removed.text)
    assert len(row_keys(removed.text)) == 1


# --- step 3: response ----------------------------------------------------------------------


async def test_the_response_step_refuses_a_select_that_does_not_compile_at_its_field(
    client: Client, editor: str, admin_token: str
) -> None:
    await create_order(client, editor)
    page = await step_page(client, "get_order", "response")
    form = {"_csrf": editor, "etag": etag_of(page), "arguments": "{}", "action": "next"}
    bad = await client.post(
        edit("get_order", "response"),
        data={**form, "select": "items[", "max_items": "lots", "max_bytes": "4096"},
    )
    assert bad.status_code == 400
    assert set(field_errors(bad.text)) == {"select", "max_items"}
    good = await client.post(
        edit("get_order", "response"),
        data={**form, "select": "{id: id}", "max_items": "20", "max_bytes": "4096"},
    )
    assert good.status_code == 303
    response = (await draft(client, admin_token))["draft"]["response"]
    assert (response["select"], response["max_items"], response["max_bytes"]) == (
        "{id: id}",
        20,
        4096,
    )


@pytest.fixture
def upstream() -> Iterator[ThreadedServer]:
    with serve_threaded(JsonHandler) as server:
        yield server


@pytest.fixture
async def egress_client(database_url: str, upstream: ThreadedServer) -> AsyncIterator[Client]:
    """The app with the loopback upstream allowlisted, as an operator allowlists a host."""
    settings = Settings(
        database_url=database_url,
        secret_key=TEST_SECRET_KEY,
        upstream_allowlist=(f"127.0.0.1:{upstream.port}",),
    )
    async with AsyncTestClient(app=create_app(settings)) as test_client:
        test_client.follow_redirects = False
        yield test_client


async def test_try_it_shows_the_raw_answer_and_the_selection_and_select_errors_at_the_field(
    egress_client: Client, admin_token: str, database_url: str, upstream: ThreadedServer
) -> None:
    client = egress_client
    await create_workspace(client, admin_token, WS)
    await grant_egress(client, admin_token, WS, f"127.0.0.1:{upstream.port}")
    csrf = await sign_in(client, await make_token(database_url, "editor", WS, name="erin"))
    await create_order(client, csrf, url=f"http://127.0.0.1:{upstream.port}/orders/{{order_id}}")
    headers = {"HX-Request": "true", "X-CSRF-Token": csrf}
    url = f"/ui/w/{WS}/operations/get_order/wizard/try"

    tried = await client.post(
        url, data={"select": "path", "arguments": '{"order_id": "A-7"}'}, headers=headers
    )
    assert tried.status_code == 200, tried.text
    assert upstream.hits == ["GET /orders/A-7"]
    assert "&#34;method&#34;: &#34;GET&#34;" in tried.text  # the raw answer, pretty-printed
    assert selected_result(tried.text) == "/orders/A-7"

    broken = await client.post(
        url, data={"select": "path[", "arguments": '{"order_id": "A-7"}'}, headers=headers
    )
    assert broken.status_code == 200
    assert set(field_errors(broken.text)) == {"select"}, broken.text
    assert 'hx-swap-oob="true"' in broken.text
    assert upstream.hits == ["GET /orders/A-7"]  # no call with a broken select

    plain = await client.post(  # without JavaScript: the whole step page, nothing saved
        edit("get_order", "response"),
        data={"_csrf": csrf, "select": "method", "arguments": '{"order_id": "B"}', "action": "try"},
    )
    assert plain.status_code == 200
    assert selected_result(plain.text) == "GET"
    assert (await draft(client, admin_token))["draft"]["response"]["select"] is None


# --- step 4: safety ------------------------------------------------------------------------


async def test_a_delete_cannot_switch_confirmation_off_and_says_so_at_the_field(
    client: Client, editor: str, admin_token: str
) -> None:
    await create_order(
        client, editor, name="delete_order", method="DELETE", description="Deletes one order."
    )
    page = await step_page(client, "delete_order", "safety")
    assert "A DELETE always needs confirmation" in page
    form = {
        "_csrf": editor,
        "etag": etag_of(page),
        "idempotency_argument": "",
        "idempotency_header": "Idempotency-Key",
        "confirmation": "false",
        "timeout_ms": "soon",
        "retries": "1",
        "action": "next",
    }
    refused = await client.post(edit("delete_order", "safety"), data=form)
    assert refused.status_code == 400
    assert set(field_errors(refused.text)) == {"confirmation", "timeout_ms"}
    saved = await client.post(
        edit("delete_order", "safety"),
        data={
            **form,
            "confirmation": "auto",
            "timeout_ms": "5000",
            "approval": "on",
            "idempotency_argument": "order_id",
        },
    )
    assert saved.status_code == 303
    stored = (await draft(client, admin_token, "delete_order"))["draft"]
    assert stored["safety"] == {"approval": True, "confirmation": "auto"}
    assert stored["execution_config"]["idempotency"] == {
        "argument": "order_id",
        "header": "Idempotency-Key",
    }
    assert stored["execution_config"]["timeout_ms"] == 5000


def scopes_field(html: str) -> str:
    found = re.search(r'name="scopes"[^>]* value="([^"]*)"', html)
    assert found, "the step has no scopes field"
    return unescape(found.group(1))


async def test_the_safety_step_sets_the_operations_scopes_and_other_steps_keep_them(
    client: Client, editor: str, admin_token: str
) -> None:
    await create_order(client, editor)
    page = await step_page(client, "get_order", "safety")
    assert scopes_field(page) == ""
    form = {
        "_csrf": editor,
        "etag": etag_of(page),
        "idempotency_argument": "",
        "idempotency_header": "Idempotency-Key",
        "confirmation": "auto",
        "timeout_ms": "5000",
        "retries": "1",
        "scopes": "orders:read, orders:read",
        "action": "stay",
    }
    twice = await client.post(edit("get_order", "safety"), data=form)
    assert twice.status_code == 400
    assert field_errors(twice.text) == {"scopes": "&#39;orders:read&#39; is listed twice"}
    saved = await client.post(
        edit("get_order", "safety"), data={**form, "scopes": "orders:read,  orders:write"}
    )
    assert saved.status_code == 303, saved.text
    assert (await draft(client, admin_token))["draft"]["scopes"] == ["orders:read", "orders:write"]
    page = await step_page(client, "get_order", "safety")
    assert scopes_field(page) == "orders:read orders:write"

    # Another step's save keeps them; the operation's page shows them.
    request = await step_page(client, "get_order", "request")
    kept = await client.post(
        edit("get_order", "request"),
        data={"_csrf": editor, "etag": etag_of(request), **request_form(title="Renamed")},
    )
    assert kept.status_code == 303, kept.text
    stored = (await draft(client, admin_token))["draft"]
    assert (stored["title"], stored["scopes"]) == ("Renamed", ["orders:read", "orders:write"])
    shown = await client.get(f"/ui/w/{WS}/operations/get_order")
    assert "<code>orders:read</code> <code>orders:write</code>" in shown.text


# --- step 5: review and publish ------------------------------------------------------------


async def test_review_lists_lint_findings_and_publish_is_blocked_by_an_error(
    client: Client, editor: str, admin_token: str
) -> None:
    await create_order(client, editor, name="call_api")
    page = await step_page(client, "call_api", "review")
    assert re.search(r'data-rule="name-generic" data-severity="error"', page)
    assert f'<a href="{edit("call_api", "request")}"><code>name</code></a>' in page
    assert 'value="publish" disabled' in page
    refused = await client.post(
        edit("call_api", "review"),
        data={"_csrf": editor, "etag": etag_of(page), "action": "publish"},
    )
    assert refused.status_code == 422
    assert 'data-code="lint_failed"' in refused.text
    assert (await draft(client, admin_token, "call_api"))["latest_version"] is None


async def test_publish_from_review_makes_version_one(
    client: Client, editor: str, admin_token: str
) -> None:
    await create_order(client, editor)
    page = await step_page(client, "get_order", "review")
    answer = await client.post(
        edit("get_order", "review"),
        data={"_csrf": editor, "etag": etag_of(page), "action": "publish"},
    )
    assert answer.status_code == 200, answer.text
    assert "Published version 1." in answer.text
    assert (await draft(client, admin_token))["latest_version"] == 1
    close = await client.post(
        edit("get_order", "review"), data={"_csrf": editor, "etag": etag_of(page), "action": "save"}
    )
    assert close.status_code == 303
    assert close.headers["location"] == f"/ui/w/{WS}/operations/get_order"


# --- revisions and roles -------------------------------------------------------------------


async def test_a_stale_page_is_refused_as_changed_by_someone_else_and_overwrites_nothing(
    client: Client, editor: str, admin_token: str
) -> None:
    await create_order(client, editor)
    page = await step_page(client, "get_order", "request")
    current = await client.get(f"{API}/get_order", headers=auth(admin_token))
    spec = {**current.json()["draft"], "description": "Changed through the API meanwhile."}
    changed = await client.put(
        f"{API}/get_order", json=spec, headers=auth(admin_token, current.headers["etag"])
    )
    assert changed.status_code == 200, changed.text
    answer = await client.post(
        edit("get_order", "request"),
        data={"_csrf": editor, "etag": etag_of(page), **request_form(description="Mine.")},
    )
    assert answer.status_code == 409
    assert 'data-code="stale_revision"' in answer.text
    assert f'href="{edit("get_order", "request")}"' in answer.text  # the reload link
    assert (await draft(client, admin_token))["draft"]["description"] == (
        "Changed through the API meanwhile."
    )


async def test_a_viewer_is_refused_every_wizard_page_and_write(
    client: Client, admin_token: str, database_url: str
) -> None:
    await create_workspace(client, admin_token, WS)
    created = await client.post(
        API,
        json={
            "name": "get_order",
            "description": "Reads one order.",
            "input": {"type": "object", "properties": {}},
            "request": {"method": "GET", "url": "https://api.example.com/orders"},
        },
        headers=auth(admin_token),
    )
    assert created.status_code == 201
    csrf = await sign_in(client, await make_token(database_url, "viewer", WS, name="vic"))
    assert (await client.get(NEW)).status_code == 403
    assert (await client.get(edit("get_order", "request"))).status_code == 403
    refused = await client.post(NEW, data={"_csrf": csrf, **request_form(name="sneaky")})
    assert refused.status_code == 403
    refused = await client.post(
        f"/ui/w/{WS}/operations/get_order/wizard/try",
        data={"arguments": "{}"},
        headers={"HX-Request": "true", "X-CSRF-Token": csrf},
    )
    assert refused.status_code == 403
    listed = await client.get(API, headers=auth(admin_token))
    assert [item["name"] for item in listed.json()["items"]] == ["get_order"]


async def test_an_unknown_step_or_operation_is_404(client: Client, editor: str) -> None:
    assert (await client.get(edit("missing", "request"))).status_code == 404
    await create_order(client, editor)
    assert (await client.get(edit("get_order", "nowhere"))).status_code == 404
    redirect = await client.get(edit("get_order"))
    assert redirect.status_code == 303
    assert redirect.headers["location"] == edit("get_order", "request")
    assert csrf_of(await step_page(client, "get_order", "safety")) == editor


async def test_a_schema_written_by_hand_survives_the_parameters_step_unchanged(
    client: Client, editor: str, admin_token: str
) -> None:
    schema = {
        "type": "object",
        "properties": {
            "order_id": {"type": "integer", "description": "The order.", "minimum": 1},
            "tags": {"type": "array", "items": {"type": "string"}, "description": "Tags."},
        },
        "required": ["order_id", "tags"],
        "additionalProperties": False,
    }
    created = await client.post(
        API,
        json={
            "name": "tag_order",
            "description": "Tags one order. Use when the user labels an order.",
            "input": schema,
            "request": {
                "method": "POST",
                "url": "https://api.example.com/orders/{order_id}/tags",
                "body": "tags",
            },
        },
        headers=auth(admin_token),
    )
    assert created.status_code == 201, created.text
    page = await step_page(client, "tag_order", "parameters")
    (key,) = row_keys(page)  # tags has items: the advanced field holds it
    assert "&#34;items&#34;" in page
    extra = re.search(r'<textarea id="f-extra"[^>]*>([^<]*)</textarea>', page)
    assert extra
    answer = await client.post(
        edit("tag_order", "parameters"),
        data={
            "_csrf": editor,
            "etag": etag_of(page),
            "row": key,
            f"{key}.name": "order_id",
            f"{key}.type": "integer",
            f"{key}.required": "on",
            f"{key}.description": "The order.",
            f"{key}.min": "1",
            "extra": unescape(extra.group(1)),
            "action": "next",
        },
    )
    assert answer.status_code == 303, answer.text
    stored = await draft(client, admin_token, "tag_order")
    assert stored["draft"]["input"] == schema
    assert stored["revision"] == 1  # the same draft again changes nothing


async def test_try_it_of_a_post_asks_for_the_acknowledgement_before_any_call(
    client: Client, editor: str
) -> None:
    await create_order(
        client,
        editor,
        name="cancel_order",
        method="POST",
        url="https://api.example.com/orders/{order_id}/cancel",
    )
    page = await step_page(client, "cancel_order", "response")
    assert "Make the real POST call upstream" in page
    refused = await client.post(
        f"/ui/w/{WS}/operations/cancel_order/wizard/try",
        data={"select": "", "arguments": '{"order_id": "A-7"}'},
        headers={"HX-Request": "true", "X-CSRF-Token": editor},
    )
    assert refused.status_code == 200
    assert set(field_errors(refused.text)) == {"acknowledge"}
    assert 'class="selected"' not in refused.text
