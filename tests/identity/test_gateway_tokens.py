"""The gateway as an OAuth 2.1 resource server, with real parts: a real OpenID
provider (oidc-provider) issuing RFC 9068 tokens, a real gateway process, the
catalog set up through the admin API's apply. What a client sees: the 401
challenge, the Protected Resource Metadata, tokens accepted for their own agent
only, scopes that pick tools, and keys working beside tokens."""

from __future__ import annotations

import pytest

from tests.support.api import Client, auth
from tests.support.gateway import wait_until
from tests.support.mcp import modern, request
from tests.support.oauth_shop import WS, Shop
from tests.support.tool_calls import Caller


async def _list(shop: Shop, token: str) -> list[str]:
    answer = await shop.http.post(
        "/mcp/v1/acme/shop", json=request("tools/list"), headers=modern(token, "tools/list")
    )
    assert answer.status_code == 200, answer.text
    return [t["name"] for t in answer.json()["result"]["tools"]]


async def test_a_client_without_a_token_is_pointed_at_the_metadata_and_the_provider(
    shop: Shop,
) -> None:
    answer = await shop.http.post("/mcp/v1/acme/shop", json=request("tools/list"))
    assert answer.status_code == 401
    metadata_url = f"{shop.url}/.well-known/oauth-protected-resource/mcp/v1/acme/shop"
    # No error parameter when no token was sent (RFC 6750 section 3.1).
    assert answer.headers["www-authenticate"] == (
        f'Bearer resource_metadata="{metadata_url}", scope="shop:read"'
    )
    metadata = await shop.http.get(metadata_url)
    assert metadata.status_code == 200
    assert metadata.headers["access-control-allow-origin"] == "*"
    assert metadata.json() == {
        "resource": shop.resource,
        "authorization_servers": [shop.idp.issuer],
        "scopes_supported": ["shop:admin", "shop:read"],
        "bearer_methods_supported": ["header"],
        "resource_name": "The shop",
    }
    # An agent that takes no tokens has no metadata.
    missing = await shop.http.get("/.well-known/oauth-protected-resource/mcp/v1/acme/nobody")
    assert missing.status_code == 404


@pytest.mark.parametrize("era", ["legacy", "modern"])
async def test_a_token_for_the_agent_calls_its_tools_and_never_reaches_the_upstream(
    shop: Shop, era: str
) -> None:
    token = await shop.token("shop:read")
    caller = Caller(shop.http, "/mcp/v1/acme/shop", token)
    result = await caller.call(era, "hours", {})
    # The caller's token is not passed through: the upstream saw no Authorization.
    assert result["structuredContent"] == {"path": "/hours", "authorization": False}


async def test_scopes_pick_the_tools_and_a_missing_scope_asks_for_a_step_up(shop: Shop) -> None:
    reader = await shop.token("shop:read")
    assert await _list(shop, reader) == ["hours"]
    refused = await Caller(shop.http, "/mcp/v1/acme/shop", reader).raw("modern", "ledger", {})
    assert refused.status_code == 403
    assert refused.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", error_description="needs shop:admin shop:read", '
        f'resource_metadata="{shop.url}/.well-known/oauth-protected-resource/mcp/v1/acme/shop", '
        'scope="shop:admin shop:read"'
    )
    admin = await shop.token("shop:read shop:admin")
    assert await _list(shop, admin) == ["hours", "ledger"]
    result = await Caller(shop.http, "/mcp/v1/acme/shop", admin).call("modern", "ledger", {})
    assert result["structuredContent"]["path"] == "/ledger"
    # A token without the agent's own scope is refused whatever it asks.
    bare = await shop.token("")
    answer = await shop.http.post(
        "/mcp/v1/acme/shop", json=request("tools/list"), headers=modern(bare, "tools/list")
    )
    assert answer.status_code == 403
    assert 'scope="shop:read"' in answer.headers["www-authenticate"]


async def test_a_token_for_another_agent_or_forged_is_refused_with_the_challenge(
    shop: Shop,
) -> None:
    other = await shop.token("shop:read", resource=f"{shop.url}/mcp/v1/acme/other")
    assert await _list_status(shop, "/mcp/v1/acme/other", other) == 200  # good where it belongs
    answer = await shop.http.post(
        "/mcp/v1/acme/shop", json=request("tools/list"), headers=modern(other, "tools/list")
    )
    assert answer.status_code == 401
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith('Bearer error="invalid_token", error_description="wrong_audience"')
    assert "resource_metadata=" in challenge
    assert answer.json()["error"]["data"] == {"reason": "wrong_audience"}
    mine = await shop.token("shop:read")
    head, claims, signature = mine.split(".")
    forged = f"{head}.{claims}.{signature[:-4]}AAAA"
    assert await _list_status(shop, "/mcp/v1/acme/shop", forged) == 401


async def _list_status(shop: Shop, path: str, token: str) -> int:
    answer = await shop.http.post(
        path, json=request("tools/list"), headers=modern(token, "tools/list")
    )
    return answer.status_code


async def test_keys_keep_working_beside_tokens_and_see_every_tool(shop: Shop) -> None:
    assert await _list(shop, shop.key) == ["hours", "ledger"]
    unknown = await shop.http.post(
        "/mcp/v1/acme/shop",
        json=request("tools/list"),
        headers=modern("crk_agent_nope", "tools/list"),
    )
    assert unknown.status_code == 401
    assert unknown.headers["www-authenticate"].startswith("Bearer resource_metadata=")


async def test_an_agent_that_takes_no_keys_sends_a_key_to_sign_in(
    shop: Shop, client: Client, admin_token: str
) -> None:
    url = f"{WS}/agents/shop"
    read = await client.get(url, headers=auth(admin_token))
    draft = read.json()["draft"]
    draft["auth"] = {**draft["auth"], "agent_keys": False}
    put = await client.put(url, json=draft, headers=auth(admin_token, read.headers["etag"]))
    assert put.status_code == 200, put.text
    published = await client.post(f"{url}/publish", headers=auth(admin_token, put.headers["etag"]))
    assert published.status_code == 200, published.text

    async def key_refused() -> bool:
        return await _list_status(shop, "/mcp/v1/acme/shop", shop.key) == 401

    await wait_until(key_refused, timeout_s=15)
    token = await shop.token("shop:read")
    assert await _list(shop, token) == ["hours"]


async def test_a_provider_change_reaches_the_gateway_like_a_publish(
    shop: Shop, client: Client, admin_token: str
) -> None:
    token = await shop.token("shop:read")
    assert await _list(shop, token) == ["hours"]
    url = f"{WS}/identity-providers/local"
    read = await client.get(url, headers=auth(admin_token))
    provider = {"name": "local", "issuer": shop.idp.issuer, "token_types": ["JWT"]}
    put = await client.put(url, json=provider, headers=auth(admin_token, read.headers["etag"]))
    assert put.status_code == 200, put.text

    async def refused_as_wrong_type() -> bool:
        answer = await shop.http.post(
            "/mcp/v1/acme/shop", json=request("tools/list"), headers=modern(token, "tools/list")
        )
        return (
            answer.status_code == 401
            and 'error_description="wrong_type"' in (answer.headers["www-authenticate"])
        )

    # The same token, remembered as accepted, is checked again under the new settings.
    await wait_until(refused_as_wrong_type, timeout_s=15)
