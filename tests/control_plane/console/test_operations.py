"""The console's Operations pages over HTTP in process: the list and its filters, one
operation with its lint findings, versions and diffs, and the editor's writes with
the revision the page was rendered with."""

from __future__ import annotations

import html
import re

import pytest

from tests.support.api import Client, auth, create_workspace, make_token
from tests.support.console import sign_in
from tests.support.operations import (
    create_operation,
    operations_path,
    order_spec,
    publish_draft,
    read_operation,
    replace_draft,
)

WS = "acme"
LIST = f"/ui/w/{WS}/operations"
_ETAG_FIELD = re.compile(r'name="etag" value="([^"]+)"')


@pytest.fixture
async def editor(client: Client, admin_token: str, database_url: str) -> str:
    """An editor's token in a fresh workspace ``acme``."""
    await create_workspace(client, admin_token, WS)
    return await make_token(database_url, "editor", WS, name="editor")


@pytest.fixture
async def viewer(editor: str, database_url: str) -> str:
    return await make_token(database_url, "viewer", WS, name="viewer")


def page_of(name: str) -> str:
    return f"{LIST}/{name}"


def row_of(page_html: str, name: str) -> str:
    """The list's table row of operation ``name``."""
    rows = [row for row in page_html.split("<tr>") if f"<code>{name}</code></a>" in row]
    assert len(rows) == 1, f"{name} is listed {len(rows)} times"
    return rows[0]


def listed(page_html: str) -> list[str]:
    return re.findall(r'/operations/[^"]+"><code>([^<]+)</code></a>', page_html)


def etag_on(page_html: str) -> str:
    """The revision a page's write forms carry."""
    found = _ETAG_FIELD.search(page_html)
    assert found, "the page has no write form"
    return html.unescape(found.group(1))


async def three_states(client: Client, editor: str) -> None:
    """``new_one`` never published, ``settled`` published as is, ``moving`` changed since."""
    for name in ("new_one", "settled", "moving"):
        await create_operation(client, editor, WS, order_spec(name, title=f"Title {name}"))
    for name in ("settled", "moving"):
        await publish_draft(client, editor, WS, name)
    await replace_draft(client, editor, WS, order_spec("moving", title="Moved on"))


# --- the list -------------------------------------------------------------------------------


async def test_the_list_shows_each_state_its_request_and_the_drafts_lint_counts(
    client: Client, editor: str
) -> None:
    await three_states(client, editor)
    generic = order_spec("call_api", request={"method": "POST", "url": "https://x.example/do"})
    await create_operation(client, editor, WS, generic)
    await sign_in(client, editor)
    answer = await client.get(LIST)
    assert answer.status_code == 200
    assert listed(answer.text) == ["call_api", "moving", "new_one", "settled"]
    assert "draft only" in row_of(answer.text, "new_one")
    assert "published v1" in row_of(answer.text, "settled")
    assert "draft ahead of v1" in row_of(answer.text, "moving")
    assert "<code>GET</code>" in row_of(answer.text, "settled")
    assert "https://api.example.com/orders/{order_id}" in row_of(answer.text, "settled")
    call_api = row_of(answer.text, "call_api")
    assert "<code>POST</code>" in call_api
    assert re.search(r"\b1 error\b", call_api)  # name-generic
    assert re.search(r"\b\d+ warnings?\b", call_api)  # idempotency-missing, response-select...
    assert "error" not in row_of(answer.text, "settled").replace("badge error", "")
    assert 'href="/ui/w/acme/operations/new"' in answer.text


async def test_the_list_filters_by_state_and_by_text_in_the_name_or_title(
    client: Client, editor: str
) -> None:
    await three_states(client, editor)
    await sign_in(client, editor)
    by_state = {
        state: listed((await client.get(LIST, params={"state": state})).text)
        for state in ("draft", "published", "ahead")
    }
    assert by_state == {"draft": ["new_one"], "published": ["settled"], "ahead": ["moving"]}
    assert listed((await client.get(LIST, params={"q": "SETT"})).text) == ["settled"]
    assert listed((await client.get(LIST, params={"q": "moved on"})).text) == ["moving"]
    assert listed((await client.get(LIST, params={"q": "%"})).text) == []  # no wildcard
    both = await client.get(LIST, params={"q": "title", "state": "draft"})
    assert listed(both.text) == ["new_one"]
    assert 'value="title"' in both.text
    assert '<option value="draft" selected>' in both.text


async def test_an_htmx_filter_gets_only_the_results_fragment(client: Client, editor: str) -> None:
    await three_states(client, editor)
    await sign_in(client, editor)
    fragment = await client.get(
        LIST,
        params={"state": "ahead"},
        headers={"HX-Request": "true", "HX-Target": "operation-results"},
    )
    assert fragment.status_code == 200
    assert "<html" not in fragment.text
    assert "<form" not in fragment.text
    assert listed(fragment.text) == ["moving"]
    restore = await client.get(
        LIST,
        params={"state": "ahead"},
        headers={"HX-Request": "true", "HX-History-Restore-Request": "true"},
    )
    assert "<html" in restore.text  # going back in history gets the whole page


async def test_a_filter_the_form_cannot_send_is_refused_next_to_its_field(
    client: Client, editor: str
) -> None:
    await sign_in(client, editor)
    answer = await client.get(LIST, params={"state": "everything", "q": "x" * 201})
    assert answer.status_code == 400
    assert 'id="filter-state-error"' in answer.text
    assert 'id="filter-q-error"' in answer.text


async def test_the_list_pages_by_name_keeping_its_filters(client: Client, editor: str) -> None:
    for index in range(103):
        await create_operation(client, editor, WS, order_spec(f"op_{index:03}"))
    await sign_in(client, editor)
    first = await client.get(LIST, params={"q": "op_"})
    assert len(listed(first.text)) == 100
    next_href = html.unescape(re.findall(r'href="([^"]+)">Next page', first.text)[0])
    assert "q=op_" in next_href
    assert "after=op_099" in next_href
    second = await client.get(next_href)
    assert listed(second.text) == ["op_100", "op_101", "op_102"]
    assert "Next page" not in second.text


# --- one operation --------------------------------------------------------------------------


async def test_the_detail_page_shows_the_draft_lint_findings_and_versions(
    client: Client, editor: str
) -> None:
    spec = order_spec(safety={"approval": True})
    spec["input"]["properties"]["status"] = {"type": "string", "enum": ["open", "paid"]}
    await create_operation(client, editor, WS, spec)
    await publish_draft(client, editor, WS, "get_order")
    await sign_in(client, editor)
    answer = await client.get(page_of("get_order"))
    assert answer.status_code == 200
    text = answer.text
    assert "published v1" in text
    assert "<code>order_id</code>" in text
    assert "The order id" in text
    assert "one of &#34;open&#34;, &#34;paid&#34;" in text
    assert "Human approval</dt><dd>required" in text
    assert "<code>response-select</code>" in text  # the whole body goes to the model
    assert "<code>param-description</code> at <code>input.properties.status</code>" in text
    assert "editor" in text  # published by
    assert "Never published" not in text
    assert 'href="/ui/w/acme/operations/get_order/edit"' in text


async def test_a_missing_operation_is_a_404_page(client: Client, editor: str) -> None:
    await sign_in(client, editor)
    answer = await client.get(page_of("no_such_thing"))
    assert answer.status_code == 404
    assert "Not found" in answer.text


async def test_the_diff_compares_any_two_versions_or_the_draft(client: Client, editor: str) -> None:
    await create_operation(client, editor, WS, order_spec())
    await publish_draft(client, editor, WS, "get_order")
    await replace_draft(client, editor, WS, order_spec(title="Order by id"))
    await publish_draft(client, editor, WS, "get_order")
    moved = order_spec(title="Order by id")
    moved["request"]["url"] = "https://api.example.com/v2/orders/{order_id}"
    await replace_draft(client, editor, WS, moved)
    await sign_in(client, editor)

    default = (await client.get(page_of("get_order"))).text  # what publishing would change
    assert "From version 2 to the draft: 1 change." in default
    assert "<code>request.url</code>" in default

    versions = await client.get(page_of("get_order"), params={"before": "1", "after": "2"})
    assert "From version 1 to version 2: 1 change." in versions.text
    assert "<code>title</code>" in versions.text
    assert "<code>request.url</code>" not in versions.text
    assert "&#34;Get order&#34;" in versions.text
    assert "&#34;Order by id&#34;" in versions.text

    backwards = await client.get(
        page_of("get_order"),
        params={"before": "draft", "after": "1"},
        headers={"HX-Request": "true", "HX-Target": "diff"},
    )
    assert backwards.status_code == 200
    assert "<html" not in backwards.text
    assert "From the draft to version 1: 2 changes." in backwards.text

    same = await client.get(page_of("get_order"), params={"before": "2", "after": "2"})
    assert "Version 2 and version 2 are the same." in same.text


async def test_a_diff_of_a_version_that_does_not_exist_is_refused_next_to_its_select(
    client: Client, editor: str
) -> None:
    await create_operation(client, editor, WS, order_spec())
    await publish_draft(client, editor, WS, "get_order")
    await sign_in(client, editor)
    for before in ("7", "latest", "-1", "1" * 20):
        answer = await client.get(page_of("get_order"), params={"before": before})
        assert answer.status_code == 400, before
        assert 'id="diff-before-error"' in answer.text


# --- writes ---------------------------------------------------------------------------------


async def test_an_editor_publishes_the_draft_with_the_revision_the_page_showed(
    client: Client, editor: str
) -> None:
    await create_operation(client, editor, WS, order_spec())
    csrf = await sign_in(client, editor)
    shown = await client.get(page_of("get_order"))
    assert "Publish the draft as version 1" in shown.text
    answer = await client.post(
        f"{page_of('get_order')}/publish", data={"_csrf": csrf, "etag": etag_on(shown.text)}
    )
    assert answer.status_code == 303
    assert answer.headers["location"] == f"{page_of('get_order')}?done=published&version=1"
    assert (await read_operation(client, editor, WS, "get_order"))["latest_version"] == 1
    after = await client.get(answer.headers["location"])
    assert "Published the draft as version 1." in after.text
    assert "published v1" in after.text
    assert "nothing to publish" in after.text


async def test_an_editor_rolls_back_to_an_earlier_version(client: Client, editor: str) -> None:
    await create_operation(client, editor, WS, order_spec())
    await publish_draft(client, editor, WS, "get_order")
    await replace_draft(client, editor, WS, order_spec(title="Order by id"))
    await publish_draft(client, editor, WS, "get_order")
    csrf = await sign_in(client, editor)
    shown = await client.get(page_of("get_order"))
    assert "Roll back to v1" in shown.text
    assert "Roll back to v2" not in shown.text  # the latest version, and the draft is it
    answer = await client.post(
        f"{page_of('get_order')}/versions/1/rollback",
        data={"_csrf": csrf, "etag": etag_on(shown.text)},
    )
    assert answer.status_code == 303
    assert answer.headers["location"].endswith("?done=rolled-back&version=3")
    operation = await read_operation(client, editor, WS, "get_order")
    assert operation["latest_version"] == 3
    assert operation["draft"]["title"] == "Get order"
    assert operation["draft_changed"] is False


async def test_discarding_resets_the_draft_or_deletes_a_never_published_operation(
    client: Client, editor: str
) -> None:
    await create_operation(client, editor, WS, order_spec())
    await publish_draft(client, editor, WS, "get_order")
    await replace_draft(client, editor, WS, order_spec(title="Order by id"))
    await create_operation(client, editor, WS, order_spec("scratch"))
    csrf = await sign_in(client, editor)
    shown = await client.get(page_of("get_order"))
    reset = await client.post(
        f"{page_of('get_order')}/discard", data={"_csrf": csrf, "etag": etag_on(shown.text)}
    )
    assert reset.status_code == 303
    assert reset.headers["location"].endswith("?done=discarded&version=1")
    assert (await read_operation(client, editor, WS, "get_order"))["draft"]["title"] == "Get order"

    scratch = await client.get(page_of("scratch"))
    gone = await client.post(
        f"{page_of('scratch')}/discard", data={"_csrf": csrf, "etag": etag_on(scratch.text)}
    )
    assert gone.status_code == 303
    assert gone.headers["location"] == f"{LIST}?deleted=scratch"
    assert "Discarded <code>scratch</code>" in (await client.get(gone.headers["location"])).text
    made_up = await client.get(LIST, params={"deleted": "get_order"})
    assert "Discarded" not in made_up.text  # it exists: the link is not believed
    missing = await client.get(operations_path(WS, "scratch"), headers=auth(editor))
    assert missing.status_code == 404


async def test_a_write_with_a_stale_revision_is_a_409_page_and_changes_nothing(
    client: Client, editor: str
) -> None:
    await create_operation(client, editor, WS, order_spec())
    csrf = await sign_in(client, editor)
    shown = await client.get(page_of("get_order"))
    await replace_draft(client, editor, WS, order_spec(title="Someone else's"))
    for action in ("publish", "discard"):
        answer = await client.post(
            f"{page_of('get_order')}/{action}", data={"_csrf": csrf, "etag": etag_on(shown.text)}
        )
        assert answer.status_code == 409, action
        assert "<code>stale_revision</code>" in answer.text
        assert "Changed by someone else" in answer.text
        assert f'<a href="{page_of("get_order")}">Reload the operation</a>' in answer.text
        assert 'name="etag"' not in answer.text  # no retry of the stale write from here
    operation = await read_operation(client, editor, WS, "get_order")
    assert operation["latest_version"] is None
    assert operation["draft"]["title"] == "Someone else's"


async def test_a_stale_htmx_write_gets_a_409_fragment_for_the_message_region(
    client: Client, editor: str
) -> None:
    await create_operation(client, editor, WS, order_spec())
    await publish_draft(client, editor, WS, "get_order")
    await replace_draft(client, editor, WS, order_spec(title="Order by id"))
    csrf = await sign_in(client, editor)
    shown = await client.get(page_of("get_order"))
    await replace_draft(client, editor, WS, order_spec(title="Someone else's"))
    answer = await client.post(
        f"{page_of('get_order')}/versions/1/rollback",
        data={"etag": etag_on(shown.text)},
        headers={"HX-Request": "true", "X-CSRF-Token": csrf},
    )
    assert answer.status_code == 409
    assert answer.headers["hx-retarget"] == "#messages"
    assert "<html" not in answer.text
    assert "<code>stale_revision</code>" in answer.text
    assert (await read_operation(client, editor, WS, "get_order"))["draft"]["title"] == (
        "Someone else's"
    )


async def test_a_write_without_the_revision_is_428(client: Client, editor: str) -> None:
    await create_operation(client, editor, WS, order_spec())
    csrf = await sign_in(client, editor)
    for etag in ("", "12", '"nonsense"'):
        answer = await client.post(
            f"{page_of('get_order')}/publish", data={"_csrf": csrf, "etag": etag}
        )
        assert answer.status_code == 428, etag
        assert "<code>if_match_required</code>" in answer.text
    assert (await read_operation(client, editor, WS, "get_order"))["latest_version"] is None


async def test_lint_errors_block_the_publish_and_show_next_to_the_button(
    client: Client, editor: str
) -> None:
    await create_operation(client, editor, WS, order_spec("call_api"))
    csrf = await sign_in(client, editor)
    shown = await client.get(page_of("call_api"))
    blockers = shown.text.split('id="publish-blockers"')[1].split("</div>")[0]
    assert "<code>name-generic</code>" in blockers
    assert "<code>response-select</code>" not in blockers  # a warning blocks nothing
    answer = await client.post(
        f"{page_of('call_api')}/publish", data={"_csrf": csrf, "etag": etag_on(shown.text)}
    )
    assert answer.status_code == 422
    refusal = answer.text.split('id="publish-refusal"')[1].split("</div>")[0]
    assert "<code>lint_failed</code>" in refusal
    assert "<code>name-generic</code>" in refusal
    assert (await read_operation(client, editor, WS, "call_api"))["latest_version"] is None


async def test_a_publish_naming_a_missing_secret_is_refused_with_the_field(
    client: Client, editor: str
) -> None:
    spec = order_spec()
    spec["request"]["auth"] = {"type": "bearer", "secret": "orders_token"}
    await create_operation(client, editor, WS, spec)
    csrf = await sign_in(client, editor)
    shown = await client.get(page_of("get_order"))
    answer = await client.post(
        f"{page_of('get_order')}/publish", data={"_csrf": csrf, "etag": etag_on(shown.text)}
    )
    assert answer.status_code == 400
    refusal = answer.text.split('id="publish-refusal"')[1].split("</div>")[0]
    assert "<code>validation_failed</code>" in refusal
    assert "<code>request.auth.secret</code>" in refusal


# --- roles ----------------------------------------------------------------------------------


async def test_a_viewer_sees_no_write_controls_and_a_forged_write_is_403(
    client: Client, editor: str, viewer: str
) -> None:
    await create_operation(client, editor, WS, order_spec())
    await publish_draft(client, editor, WS, "get_order")
    await replace_draft(client, editor, WS, order_spec(title="Order by id"))
    etag = (await client.get(operations_path(WS, "get_order"), headers=auth(editor))).headers[
        "etag"
    ]
    csrf = await sign_in(client, viewer)
    listing = await client.get(LIST)
    assert listing.status_code == 200
    assert "New operation" not in listing.text
    shown = await client.get(page_of("get_order"))
    assert shown.status_code == 200
    assert "draft ahead of v1" in shown.text
    assert 'method="post" action="/ui/w/acme/operations' not in shown.text
    assert 'name="etag"' not in shown.text
    assert "/edit" not in shown.text
    for action in ("publish", "discard", "versions/1/rollback"):
        forged = await client.post(
            f"{page_of('get_order')}/{action}", data={"_csrf": csrf, "etag": etag}
        )
        assert forged.status_code == 403, action
        assert "<code>forbidden</code>" in forged.text
    operation = await read_operation(client, editor, WS, "get_order")
    assert operation["latest_version"] == 1
    assert operation["draft"]["title"] == "Order by id"


async def test_operations_of_a_workspace_without_a_role_are_404(
    client: Client, editor: str, admin_token: str, database_url: str
) -> None:
    await create_workspace(client, admin_token, "other")
    stranger = await make_token(database_url, "owner", "other", name="stranger")
    await create_operation(client, editor, WS, order_spec())
    csrf = await sign_in(client, stranger)
    assert (await client.get(LIST)).status_code == 404
    assert (await client.get(page_of("get_order"))).status_code == 404
    forged = await client.post(f"{page_of('get_order')}/publish", data={"_csrf": csrf})
    assert forged.status_code == 404
