"""The Agents pages over HTTP in process: create, bind, publish and unpublish with the
ETag the page was rendered with, the MCP endpoint and client configurations, the
agent's webhook subscriptions, and what a viewer may not do."""

from __future__ import annotations

import html
import re
import textwrap

import pytest
from litestar.testing import AsyncTestClient

from control_plane.app import create_app
from control_plane.cli.banner import mcp_curls
from control_plane.console.mcp_clients import KEY_PLACEHOLDER
from shared.settings import Settings
from tests.support.api import Client, auth, create_workspace, make_token
from tests.support.console import hidden_value, sign_in
from tests.support.crank_files import rates_operation
from tests.support.db import TEST_SECRET_KEY

API = "/api/v1/workspaces/acme"
UI = "/ui/w/acme/agents"
PUBLISHED_OP = "frankfurter_latest_rate"
DRAFT_OP = "frankfurter_draft_rate"


@pytest.fixture
async def acme(client: Client, admin_token: str) -> None:
    """Workspace acme with one published operation and one never published."""
    await create_workspace(client, admin_token, "acme")
    applied = await client.post(
        f"{API}/apply?publish=true",
        json={"operations": [rates_operation()]},
        headers=auth(admin_token),
    )
    assert applied.status_code == 200, applied.text
    drafted = await client.post(
        f"{API}/operations", json=rates_operation(name=DRAFT_OP), headers=auth(admin_token)
    )
    assert drafted.status_code == 201, drafted.text


async def _signed_in(client: Client, database_url: str, role: str) -> str:
    return await sign_in(client, await make_token(database_url, role, workspace="acme"))


async def _create(client: Client, csrf: str, slug: str = "rates") -> str:
    answer = await client.post(UI, data={"_csrf": csrf, "slug": slug, "title": "Rates"})
    assert answer.status_code == 303, answer.text
    assert answer.headers["location"] == f"{UI}/{slug}?done=created"
    return f"{UI}/{slug}"


async def _agent(client: Client, token: str, slug: str = "rates") -> dict[str, object]:
    answer = await client.get(f"{API}/agents/{slug}", headers=auth(token))
    assert answer.status_code == 200, answer.text
    body: dict[str, object] = answer.json()
    return body


@pytest.mark.usefixtures("acme")
async def test_an_editor_creates_binds_publishes_with_warnings_and_unpublishes(
    client: Client, admin_token: str, database_url: str
) -> None:
    csrf = await _signed_in(client, database_url, "editor")
    empty = await client.get(UI)
    assert empty.status_code == 200
    assert "No agents yet" in empty.text
    path = await _create(client, csrf)

    page = await client.get(path)
    assert page.status_code == 200
    assert "draft, not published" in page.text
    for name in (PUBLISHED_OP, DRAFT_OP):
        assert f'name="operations" value="{name}"' in page.text
    saved = await client.post(
        path,
        data={
            "_csrf": csrf,
            "etag": hidden_value(page.text, "etag"),
            "title": "Currency rates",
            "description": "Rates of the day.",
            "operations": [PUBLISHED_OP, DRAFT_OP],
        },
    )
    assert saved.status_code == 303, saved.text
    draft = (await _agent(client, admin_token))["draft"]
    assert isinstance(draft, dict)
    assert draft["operations"] == [PUBLISHED_OP, DRAFT_OP]
    assert draft["title"] == "Currency rates"

    page = await client.get(path)
    published = await client.post(
        f"{path}/publish", data={"_csrf": csrf, "etag": hidden_value(page.text, "etag")}
    )
    # Redirect after POST: the report is on the page the browser lands on with a GET.
    assert published.status_code == 303, published.text
    assert published.headers["location"] == f"{path}?done=published"
    published = await client.get(published.headers["location"])
    assert "Published as version 1" in published.text
    # The operation never published is left out of the catalog, and the page says so.
    assert published.text.count("operation_not_published") == 1
    assert f"operation &#39;{DRAFT_OP}&#39; has no published version" in published.text
    state = await _agent(client, admin_token)
    assert state["published"] is not None
    assert "published v1" in (await client.get(UI)).text

    unpublished = await client.post(
        f"{path}/unpublish", data={"_csrf": csrf, "etag": hidden_value(published.text, "etag")}
    )
    assert unpublished.status_code == 303
    assert (await _agent(client, admin_token))["published"] is None


@pytest.mark.usefixtures("acme")
async def test_a_draft_changed_since_the_page_was_rendered_is_not_overwritten(
    client: Client, admin_token: str, database_url: str
) -> None:
    csrf = await _signed_in(client, database_url, "editor")
    path = await _create(client, csrf)
    rendered = hidden_value((await client.get(path)).text, "etag")
    first = await client.post(
        path, data={"_csrf": csrf, "etag": rendered, "title": "First", "operations": PUBLISHED_OP}
    )
    assert first.status_code == 303
    second = await client.post(path, data={"_csrf": csrf, "etag": rendered, "title": "Second"})
    assert second.status_code == 409
    assert "stale_revision" in second.text
    assert "Reload" in second.text
    assert 'value="First"' in second.text  # the page now shows the draft as it is
    assert hidden_value(second.text, "etag") != rendered
    stale_publish = await client.post(f"{path}/publish", data={"_csrf": csrf, "etag": rendered})
    assert stale_publish.status_code == 409
    state = await _agent(client, admin_token)
    assert state["published"] is None
    draft = state["draft"]
    assert isinstance(draft, dict)
    assert draft["title"] == "First"
    without = await client.post(path, data={"_csrf": csrf, "title": "No ETag"})
    assert without.status_code == 428


@pytest.mark.usefixtures("acme")
async def test_a_refused_create_says_why_next_to_the_field(
    client: Client, database_url: str
) -> None:
    csrf = await _signed_in(client, database_url, "editor")
    bad = await client.post(UI, data={"_csrf": csrf, "slug": "Not A Slug", "title": "Kept"})
    assert bad.status_code == 400
    assert 'id="slug-error"' in bad.text
    assert 'aria-invalid="true" aria-describedby="slug-error slug-hint"' in bad.text
    assert 'value="Kept"' in bad.text  # what was typed stays in the form
    await _create(client, csrf)
    taken = await client.post(UI, data={"_csrf": csrf, "slug": "rates"})
    assert taken.status_code == 409
    assert 'id="slug-error"' in taken.text


@pytest.mark.usefixtures("acme")
async def test_the_endpoint_is_a_gateway_path_and_the_snippets_hold_no_key(
    client: Client, database_url: str
) -> None:
    csrf = await _signed_in(client, database_url, "editor")
    page = await client.get(await _create(client, csrf))
    text = html.unescape(page.text)
    assert '<code id="endpoint-url">/mcp/v1/acme/rates</code>' in page.text
    assert "on the MCP gateway's host" in text
    for client_name in (
        "Claude Desktop",
        "Claude Code",
        "Cursor",
        "VS Code",
        "Python MCP SDK",
        "TypeScript MCP SDK",
        "MCP Inspector",
        "curl",
    ):
        assert f">{client_name}</h3>" in page.text, client_name
    assert "https://GATEWAY_HOST/mcp/v1/acme/rates" in text  # in the configurations
    assert "<code>https://GATEWAY_HOST/mcp/v1/acme/rates/approvals/inbox</code>" in page.text
    for line in mcp_curls("https://GATEWAY_HOST/mcp/v1/acme/rates", KEY_PLACEHOLDER):
        assert textwrap.dedent(line) in text  # crank up's own curl lines, shared
    assert re.search(r"crk_(agent|approval)_[A-Za-z0-9]{20}", text) is None
    copy_targets = set(re.findall(r'data-copy="([^"]+)"', page.text))
    assert copy_targets
    assert all(f'id="{target}"' in page.text for target in copy_targets)


@pytest.mark.parametrize(
    ("prefix", "url"),
    [
        ("", "https://mcp.example.com/mcp/v1/acme/rates"),
        ("crank/", "https://mcp.example.com/crank/v1/acme/rates"),  # a proxy's path prefix
    ],
)
async def test_with_a_public_url_the_endpoint_is_a_whole_url(
    database_url: str, admin_token: str, prefix: str, url: str
) -> None:
    app = create_app(
        Settings(
            database_url=database_url,
            secret_key=TEST_SECRET_KEY,
            public_url="https://mcp.example.com/",
            public_path_prefix=prefix,
        )
    )
    async with AsyncTestClient(app=app) as public_client:
        public_client.follow_redirects = False
        await create_workspace(public_client, admin_token, "acme")
        csrf = await sign_in(public_client, admin_token)
        page = await public_client.get(await _create(public_client, csrf))
        assert f'<code id="endpoint-url">{url}</code>' in page.text
        text = html.unescape(page.text)
        assert f"claude mcp add --transport http crank-acme-rates {url}" in text
        assert f"curl {url}/approvals" in text
        assert f'<a href="{url}/approvals/inbox">' in page.text  # the approver inbox
        assert "on the MCP gateway's host" not in text


@pytest.mark.usefixtures("acme")
async def test_a_webhook_secret_is_shown_once_and_a_subscription_revoked_after_confirming(
    client: Client, admin_token: str, database_url: str
) -> None:
    csrf = await _signed_in(client, database_url, "editor")
    path = await _create(client, csrf)
    bad = await client.post(
        f"{path}/webhooks", data={"_csrf": csrf, "url": "ftp://nope", "events": "approval.created"}
    )
    assert bad.status_code == 400
    assert 'id="url-error"' in bad.text
    created = await client.post(
        f"{path}/webhooks",
        data={
            "_csrf": csrf,
            "url": "https://hooks.example.com/crank",
            "events": ["approval.created", "approval.decided"],
            "format": "standard",
        },
    )
    assert created.status_code == 200, created.text
    secret = re.search(r'id="webhook-secret">([^<]+)<', created.text)
    assert secret
    assert secret.group(1).startswith("whsec_")
    listed = await client.get(f"{API}/agents/rates/webhooks", headers=auth(admin_token))
    [subscription] = listed.json()["items"]
    assert subscription["events"] == ["approval.created", "approval.decided"]
    later = await client.get(path)
    assert "https://hooks.example.com/crank" in later.text
    assert secret.group(1) not in later.text

    revoke = f"{path}/webhooks/{subscription['id']}/revoke"
    confirm = await client.get(revoke)
    assert confirm.status_code == 200
    assert (await client.get(f"{API}/agents/rates/webhooks", headers=auth(admin_token))).json()[
        "items"
    ]  # asking is not revoking
    revoked = await client.post(revoke, data={"_csrf": csrf})
    assert revoked.status_code == 303
    after = await client.get(f"{API}/agents/rates/webhooks", headers=auth(admin_token))
    assert after.json()["items"] == []


@pytest.mark.usefixtures("acme")
async def test_a_viewer_sees_no_write_controls_and_a_forged_write_is_refused(
    client: Client, admin_token: str, database_url: str
) -> None:
    editor_client = client
    editor_csrf = await _signed_in(editor_client, database_url, "editor")
    path = await _create(editor_client, editor_csrf)
    editor_client.cookies.clear()

    csrf = await _signed_in(client, database_url, "viewer")
    listing = await client.get(UI)
    assert listing.status_code == 200
    assert "Create agent" not in listing.text
    page = await client.get(path)
    assert page.status_code == 200
    for control in ("Save draft", ">Publish<", "Unpublish", "Subscribe"):
        assert control not in page.text, control
    etag = hidden_value(page.text, "etag")
    for target, data in (
        (UI, {"slug": "forged"}),
        (path, {"etag": etag, "title": "Forged"}),
        (f"{path}/publish", {"etag": etag}),
        (f"{path}/unpublish", {"etag": etag}),
        (f"{path}/webhooks", {"url": "https://hooks.example.com/x"}),
    ):
        answer = await client.post(target, data={"_csrf": csrf, **data})
        assert answer.status_code == 403, target
    state = await _agent(client, admin_token)
    draft = state["draft"]
    assert isinstance(draft, dict)
    assert draft["title"] == "Rates"
    assert state["published"] is None


@pytest.mark.usefixtures("acme")
async def test_an_editor_sets_the_agents_auth_and_a_refusal_is_shown_beside_its_field(
    client: Client, admin_token: str, database_url: str
) -> None:
    for name, issuer in (("corp", "https://id.example.com"), ("partners", "https://p.example")):
        created = await client.post(
            f"{API}/identity-providers",
            json={"name": name, "issuer": issuer},
            headers=auth(admin_token),
        )
        assert created.status_code == 201, created.text
    csrf = await _signed_in(client, database_url, "editor")
    path = await _create(client, csrf)
    page = await client.get(path)
    for name in ("corp", "partners"):
        assert f'name="auth.providers" value="{name}"' in page.text
    assert 'name="auth.agent_keys" value="yes" checked' in page.text
    form = {"_csrf": csrf, "etag": hidden_value(page.text, "etag"), "title": "Rates"}

    locked_out = await client.post(path, data={**form, "auth.agent_keys": "no"})
    assert locked_out.status_code == 400
    assert 'id="auth.agent_keys-error"' in locked_out.text
    assert "agent keys are the only way in" in locked_out.text
    bad_scope = await client.post(
        path, data={**form, "auth.providers": ["corp"], "auth.scopes": 'crm.read "x"'}
    )
    assert bad_scope.status_code == 400
    assert 'id="auth.scopes-error"' in bad_scope.text
    assert "is not an OAuth scope" in bad_scope.text
    assert 'value="corp" checked' in bad_scope.text  # what was chosen is kept

    saved = await client.post(
        path,
        data={
            **form,
            "auth.providers": ["partners", "corp"],
            "auth.agent_keys": "yes",
            "auth.scopes": "crm.read, crm.write",
        },
    )
    assert saved.status_code == 303, saved.text
    draft = (await _agent(client, admin_token))["draft"]
    assert isinstance(draft, dict)
    assert draft["auth"] == {
        "providers": ["partners", "corp"],
        "agent_keys": True,
        "scopes": ["crm.read", "crm.write"],
    }
    page = await client.get(path)
    assert 'value="crm.read crm.write"' in page.text
    # A form without the agent-keys choice (a page older than it) keeps the stored answer;
    # unticking a provider drops it, the others keep their order.
    kept = await client.post(
        path,
        data={
            "_csrf": csrf,
            "etag": hidden_value(page.text, "etag"),
            "title": "Rates",
            "auth.providers": ["corp"],
        },
    )
    assert kept.status_code == 303, kept.text
    draft = (await _agent(client, admin_token))["draft"]
    assert isinstance(draft, dict)
    assert draft["auth"] == {"providers": ["corp"], "agent_keys": True, "scopes": []}
    refused = await client.get("/ui/w/acme/identity-providers/corp")
    assert '<a href="/ui/w/acme/agents/rates">rates</a>' in refused.text
