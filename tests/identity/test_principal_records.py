"""Who called is recorded, never the token (issue 28 item 5; docs/architecture.md,
"Identity"), with real parts: a real OpenID provider (oidc-provider) signing RFC 9068
tokens for a person with a display name, a real gateway process at debug level, an
operation behind approval, the approver's endpoints and inbox, the approval worker,
and the control plane's call log API over the same database.

A call with the person's token makes an approval whose record names them; the call
log holds both rows of the approved call (the ask and the worker's run) with the
person's issuer, subject, name and client, and the API filters by them; a key's call
beside it names the key only. No log line holds the token, in any spelling, while the
lines of the person's requests carry who they were.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from playwright.async_api import expect

from shared.crypto import b64url_decode
from shared.keys import display_prefix
from tests.support.api import Client, auth
from tests.support.browser import browser_page, launch_browser
from tests.support.gateway import Gateway, run_gateway, serve_upstream, wait_until
from tests.support.masking import leaks
from tests.support.oidc import OpenIDProvider, openid_provider
from tests.support.processes import free_port
from tests.support.tool_calls import Caller

WS = "/api/v1/workspaces/acme"
MCP = "/mcp/v1/acme/shop"
APPROVALS = "/mcp/v1/acme/shop/approvals"
DANA = {"name": "Dana Ng", "email": "dana@example.test", "groups": ["staff"]}


def _refund(port: int) -> dict[str, Any]:
    return {
        "name": "refund",
        "description": "Refunds one order. Use when the customer asks for their money back.",
        "input": {
            "type": "object",
            "properties": {"order": {"type": "string", "description": "Order id, e.g. o-1"}},
            "required": ["order"],
            "additionalProperties": False,
        },
        "request": {"method": "POST", "url": f"http://127.0.0.1:{port}/refunds"},
        "safety": {"approval": True},
    }


async def _upstream() -> web.Application:
    async def refund(request: web.Request) -> web.Response:
        return web.json_response({"refunded": (await request.json())["order"]})

    app = web.Application()
    app.router.add_post("/refunds", refund)
    return app


@dataclass
class RefundShop:
    gateway: Gateway
    resource: str  # agent shop's canonical URL
    agent_key: str
    approval_key: str
    idp: OpenIDProvider
    http: httpx.AsyncClient


@pytest.fixture
async def refund_shop(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> AsyncIterator[RefundShop]:
    h = auth(admin_token)
    created = await client.post("/api/v1/workspaces", json={"slug": "acme"}, headers=h)
    assert created.status_code == 201, created.text
    async with (
        openid_provider(tmp_path, scopes="shop:read", accounts={"dana": DANA}) as idp,
        serve_upstream(await _upstream()) as upstream_port,
    ):
        file = {
            "workspace": "acme",
            "identity_providers": [{"name": "local", "issuer": idp.issuer}],
            "operations": [_refund(upstream_port)],
            "agents": [
                {
                    "slug": "shop",
                    "title": "The shop",
                    "operations": ["refund"],
                    "auth": {"providers": ["local"], "scopes": ["shop:read"]},
                }
            ],
        }
        applied = await client.post(f"{WS}/apply", params={"publish": "true"}, json=file, headers=h)
        assert applied.status_code == 200, applied.text
        keys = {}
        for kind in ("agent", "approval"):
            made = await client.post(f"{WS}/keys", json={"agent": "shop", "kind": kind}, headers=h)
            assert made.status_code == 201, made.text
            keys[kind] = made.json()["key"]
        port = free_port()
        public = f"http://127.0.0.1:{port}"
        env = {
            "CRANK_PUBLIC_URL": public,
            "CRANK_ALLOW_LOOPBACK_UPSTREAMS": "true",
            "CRANK_CALL_LOG_FLUSH_MS": "100",
            "CRANK_LOG_LEVEL": "debug",
        }
        async with (
            run_gateway(database_url, tmp_path, port=port, extra_env=env) as gateway,
            httpx.AsyncClient(base_url=public, timeout=20) as http,
        ):
            yield RefundShop(gateway, f"{public}{MCP}", keys["agent"], keys["approval"], idp, http)


def _claims(token: str) -> dict[str, Any]:
    """The access token's payload, as the test's own view of what the IdP said."""
    claims: dict[str, Any] = json.loads(b64url_decode(token.split(".")[1]))
    return claims


async def _approvals(refund_shop: RefundShop, query: str = "") -> list[dict[str, Any]]:
    answer = await refund_shop.http.get(
        f"{APPROVALS}{query}", headers={"Authorization": f"Bearer {refund_shop.approval_key}"}
    )
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


async def _calls(client: Client, admin_token: str, query: str = "") -> list[dict[str, Any]]:
    answer = await client.get(f"{WS}/calls{query}", headers=auth(admin_token))
    assert answer.status_code == 200, answer.text
    items: list[dict[str, Any]] = answer.json()["items"]
    return items


async def test_a_persons_call_names_them_on_the_approval_and_the_call_log_never_the_token(
    refund_shop: RefundShop, client: Client, admin_token: str
) -> None:
    registered = await refund_shop.idp.register_client()
    tokens = await refund_shop.idp.sign_in(
        "dana", resource=refund_shop.resource, scope="openid shop:read", client=registered
    )
    token = tokens.access_token
    claims = _claims(token)
    assert claims["client_id"] == registered.client_id  # RFC 9068: the client is named
    person = {
        "issuer": refund_shop.idp.issuer,
        "subject": "dana",
        "name": "Dana Ng",
        "client_id": registered.client_id,
    }

    # The person asks; the approval record, as the approver's endpoints (and so the
    # inbox) read it, names them.
    asked = await Caller(refund_shop.http, MCP, token).call("modern", "refund", {"order": "o-1"})
    assert asked["structuredContent"]["status"] == "approval_required"
    approval_id = asked["structuredContent"]["approval_id"]
    (pending,) = await _approvals(refund_shop, "?status=pending")
    assert (pending["id"], pending["requester"]) == (approval_id, person)
    one = await refund_shop.http.get(
        f"{APPROVALS}/{approval_id}",
        headers={"Authorization": f"Bearer {refund_shop.approval_key}"},
    )
    assert one.json()["requester"] == person

    # A key asks too (other arguments: another approval); its record names the key.
    by_key = await Caller(refund_shop.http, MCP, refund_shop.agent_key).call(
        "modern", "refund", {"order": "o-2"}
    )
    key_approval = by_key["structuredContent"]["approval_id"]
    records = {r["id"]: r for r in await _approvals(refund_shop)}
    assert records[key_approval]["requester"] == {"key": display_prefix(refund_shop.agent_key)}

    # Approved, the worker runs the call; its own call log row names the person too.
    decided = await refund_shop.http.post(
        f"{APPROVALS}/{approval_id}/approve",
        json={"approve": "yes"},
        headers={"Authorization": f"Bearer {refund_shop.approval_key}"},
    )
    assert decided.status_code == 200, decided.text
    assert decided.json()["requester"] == person
    # The decision's audit entry names who asked.
    audit = await client.get("/api/v1/workspaces/acme/audit", headers=auth(admin_token))
    decision = next(e for e in audit.json()["items"] if e["action"] == "approval.approved")
    assert decision["details"]["requester"] == person

    async def both_rows_logged() -> bool:
        rows = await _calls(client, admin_token, "?principal_subject=dana")
        return len(rows) == 2

    await wait_until(both_rows_logged, timeout_s=20)
    ran, asking = await _calls(client, admin_token, "?principal_subject=dana")
    assert (asking["outcome"], ran["outcome"]) == ("approval_required", "ok")
    for row in (asking, ran):
        assert row["approval_id"] == approval_id
        assert (
            row["principal_issuer"],
            row["principal_subject"],
            row["principal_name"],
            row["client_id"],
        ) == (person["issuer"], "dana", "Dana Ng", registered.client_id)
        assert row["key_prefix"] is None
    issuer_rows = await _calls(client, admin_token, f"?principal_issuer={refund_shop.idp.issuer}")
    assert [r["id"] for r in issuer_rows] == [ran["id"], asking["id"]]
    # The key's call: the key, no principal; the principal filters leave it out.
    (key_row,) = [r for r in await _calls(client, admin_token) if r["approval_id"] == key_approval]
    assert key_row["key_prefix"] == display_prefix(refund_shop.agent_key)
    assert key_row["principal_subject"] is None
    assert key_row["client_id"] is None
    assert await _calls(client, admin_token, "?principal_subject=nobody") == []

    # The logs: the person's request lines say who, and nothing holds the token.
    log = refund_shop.gateway.log_path.read_text()
    lines = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    theirs = [line for line in lines if line.get("principal") == f"{refund_shop.idp.issuer} dana"]
    assert theirs, "no log line of the person's requests names them"
    assert {line.get("client_id") for line in theirs} == {registered.client_id}
    assert any(line.get("key_id") is not None for line in lines)  # the key's requests
    assert leaks(log, [token]) == []
    # Nor the token's signature alone (a log that cut the token would still leak it).
    assert token.rsplit(".", 1)[1] not in log


async def test_the_inbox_shows_who_asked(refund_shop: RefundShop) -> None:
    tokens = await refund_shop.idp.sign_in(
        "dana", resource=refund_shop.resource, scope="openid shop:read"
    )
    asked = await Caller(refund_shop.http, MCP, tokens.access_token).call(
        "modern", "refund", {"order": "o-3"}
    )
    approval_id = asked["structuredContent"]["approval_id"]
    async with launch_browser() as browser, browser_page(browser) as page:
        await page.goto(refund_shop.gateway.url + APPROVALS + "/inbox")
        await page.get_by_role("textbox", name="Approval key").fill(refund_shop.approval_key)
        await page.keyboard.press("Enter")
        meta = page.locator(f"#pending article#{approval_id} .meta")
        await expect(meta).to_contain_text("asked by Dana Ng (dana)")
        # The issuer and client are one hover away, never a token.
        title = await meta.locator(".requester").get_attribute("title")
        assert title is not None
        assert title.startswith(f"issuer {refund_shop.idp.issuer} · client ")
