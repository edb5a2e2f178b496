"""The identity tests' OpenID provider (tests/support/oidc.py) does what the gateway will rely on.

A real oidc-provider process on loopback, signed into over plain HTTP as a client would:
discovery names the issuer exactly; a token asked for resource R is an RFC 9068 JWT whose
aud is R; a refresh keeps that audience; a restart with new keys rotates the signing key.
One provider per key algorithm serves the module.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx2
import pytest
from mcp.client.auth import OAuthClientProvider
from mcp.client.auth.utils import (
    build_oauth_authorization_server_metadata_discovery_urls,
    create_client_registration_request,
    handle_auth_metadata_response,
    handle_registration_response,
    validate_metadata_issuer,
)
from mcp.shared.auth import OAuthClientMetadata, OAuthMetadata
from pydantic import AnyUrl

from tests.support.oidc import (
    Alg,
    MemoryTokenStorage,
    OpenIDProvider,
    jwt_parts,
    openid_provider,
)
from tests.support.threaded_http import ThreadedServer, serve_threaded

RESOURCE = "http://127.0.0.1:9/mcp/agents/orders"
ACCOUNTS = {"alice": {"name": "Alice Example", "email": "alice@corp.test", "groups": ["approvers"]}}


@pytest.fixture(scope="module", params=["RS256", "ES256"])
async def provider(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[OpenIDProvider]:
    alg: Alg = request.param
    async with openid_provider(
        tmp_path_factory.mktemp(f"oidc-{alg}"), alg=alg, accounts=ACCOUNTS
    ) as started:
        yield started


async def test_starts_in_well_under_a_few_seconds(provider: OpenIDProvider) -> None:
    assert provider.started_in_s < 3, f"started in {provider.started_in_s:.2f} s"


async def test_discovery_names_the_issuer_byte_for_byte(provider: OpenIDProvider) -> None:
    async with provider.http() as http:
        response = await http.get("/.well-known/openid-configuration")
    assert response.status_code == 200
    assert response.json()["issuer"] == f"http://127.0.0.1:{provider.port}"
    assert f'"issuer":"{provider.issuer}"'.encode() in response.content
    metadata = response.json()
    assert metadata["code_challenge_methods_supported"] == ["S256"]
    assert "registration_endpoint" in metadata
    assert "none" in metadata["token_endpoint_auth_methods_supported"]


async def test_an_access_token_for_a_resource_is_a_jwt_for_that_audience(
    provider: OpenIDProvider,
) -> None:
    client = await provider.register_client()
    tokens = await provider.sign_in(
        "alice",
        resource=RESOURCE,
        scope="openid offline_access crank:read crank:write",
        client=client,
    )
    header, claims = jwt_parts(tokens.access_token)
    assert header["typ"] == "at+jwt"
    assert header["alg"] == provider.alg
    assert header["kid"] == provider.signing_kid
    assert claims["iss"] == provider.issuer
    assert claims["aud"] == RESOURCE
    assert claims["sub"] == "alice"
    assert claims["client_id"] == client.client_id
    assert claims["scope"] == "crank:read crank:write"
    assert time.time() < claims["exp"] <= time.time() + tokens.expires_in + 5
    assert (claims["name"], claims["email"], claims["groups"]) == (
        "Alice Example",
        "alice@corp.test",
        ["approvers"],
    )
    assert tokens.refresh_token is not None
    assert tokens.id_token is not None
    _id_header, id_claims = jwt_parts(tokens.id_token)
    assert (id_claims["iss"], id_claims["aud"], id_claims["sub"]) == (
        provider.issuer,
        client.client_id,
        "alice",
    )


async def test_an_unlisted_login_gets_claims_derived_from_its_name(
    provider: OpenIDProvider,
) -> None:
    tokens = await provider.sign_in("bob", resource=RESOURCE, scope="openid crank:read")
    _header, claims = jwt_parts(tokens.access_token)
    assert (claims["sub"], claims["name"], claims["email"], claims["groups"]) == (
        "bob",
        "bob",
        "bob@example.test",
        [],
    )
    assert claims["scope"] == "crank:read"


async def test_a_resource_off_loopback_is_refused(provider: OpenIDProvider) -> None:
    client = await provider.register_client()
    async with provider.http() as http:
        response = await http.get(
            (await provider.discovery())["authorization_endpoint"],
            params={
                "response_type": "code",
                "client_id": client.client_id,
                "redirect_uri": client.redirect_uri,
                "scope": "openid",
                "resource": "https://gateway.example.com/mcp",
                "code_challenge": "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM",
                "code_challenge_method": "S256",
            },
        )
    assert response.is_redirect
    assert "error=invalid_target" in response.headers["location"]


async def test_a_refresh_keeps_the_audience_and_rotates_the_refresh_token(
    provider: OpenIDProvider,
) -> None:
    client = await provider.register_client()
    first = await provider.sign_in("alice", resource=RESOURCE, client=client)
    assert first.refresh_token is not None
    refreshed = await provider.refresh(first.refresh_token, client.client_id)
    assert refreshed.access_token != first.access_token
    _header, claims = jwt_parts(refreshed.access_token)
    assert (claims["aud"], claims["sub"]) == (RESOURCE, "alice")
    assert refreshed.refresh_token not in (None, first.refresh_token)
    async with provider.http() as http:
        reused = await http.post(
            (await provider.discovery())["token_endpoint"],
            data={
                "grant_type": "refresh_token",
                "refresh_token": first.refresh_token,
                "client_id": client.client_id,
            },
        )
    assert reused.status_code == 400
    assert reused.json()["error"] == "invalid_grant"


async def kids(provider: OpenIDProvider) -> list[str]:
    return [key["kid"] for key in (await provider.jwks())["keys"]]


async def test_a_restart_with_new_keys_rotates_the_signing_key(provider: OpenIDProvider) -> None:
    before = await kids(provider)
    assert before == [provider.signing_kid]
    assert all("d" not in key for key in (await provider.jwks())["keys"]), "private key published"

    await provider.restart(new_keys=True)
    after = await kids(provider)
    assert len(after) == 1
    assert after[0] not in before
    tokens = await provider.sign_in("alice", resource=RESOURCE)
    header, _claims = jwt_parts(tokens.access_token)
    assert header["kid"] == after[0]

    await provider.restart(new_keys=True, keep_old_keys=True)
    overlapping = await kids(provider)
    assert overlapping[1:] == after
    assert overlapping[0] not in after
    tokens = await provider.sign_in("alice", resource=RESOURCE)
    assert jwt_parts(tokens.access_token)[0]["kid"] == overlapping[0]


async def test_a_restart_forgets_registered_clients(provider: OpenIDProvider) -> None:
    client = await provider.register_client()
    await provider.restart(new_keys=False)
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.get(
            (await provider.discovery())["authorization_endpoint"],
            params={"client_id": client.client_id, "response_type": "code", "scope": "openid"},
        )
    assert response.status_code == 400
    assert "invalid_client" in response.text


async def test_the_mcp_sdk_accepts_its_metadata_and_registers_with_it(
    provider: OpenIDProvider,
) -> None:
    """The SDK's own discovery order, issuer check (a simple string comparison) and
    registration, as its OAuthClientProvider runs them once a resource names this issuer."""
    metadata: OAuthMetadata | None = None
    async with provider.http() as http:
        for url in build_oauth_authorization_server_metadata_discovery_urls(
            provider.issuer, RESOURCE
        ):
            found, metadata = await handle_auth_metadata_response(await http.get(url))
            assert found
            if metadata is not None:
                break
        assert metadata is not None
        validate_metadata_issuer(metadata, provider.issuer)
        request = create_client_registration_request(
            metadata,
            OAuthClientMetadata(
                redirect_uris=[AnyUrl("http://localhost:3030/callback")],
                token_endpoint_auth_method="none",
                scope="openid offline_access crank:read",
            ),
            provider.issuer,
        )
        registered = await handle_registration_response(await http.send(request))
    assert registered.client_id
    assert registered.token_endpoint_auth_method == "none"
    assert set(registered.grant_types) >= {"authorization_code", "refresh_token"}


class ProtectedResource(BaseHTTPRequestHandler):
    """Stands in for an agent endpoint until the gateway is a resource server: RFC 9728
    metadata naming the provider, 401 without a bearer token, and with one, the token
    echoed back so the test can read what the client sent."""

    server: ThreadedServer
    issuer = ""

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        origin = f"http://127.0.0.1:{self.server.port}"
        if self.path == "/.well-known/oauth-protected-resource/mcp":
            self._json(200, {"resource": f"{origin}/mcp", "authorization_servers": [self.issuer]})
        elif self.headers.get("Authorization", "").startswith("Bearer "):
            self._json(200, {"token": self.headers["Authorization"].removeprefix("Bearer ")})
        else:
            metadata = f"{origin}/.well-known/oauth-protected-resource/mcp"
            self._json(
                401,
                {},
                {"WWW-Authenticate": f'Bearer resource_metadata="{metadata}", scope="crank:read"'},
            )

    def _json(
        self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        raw = json.dumps(body).encode()
        self.send_response(status)
        for name, value in {"Content-Type": "application/json", **(headers or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


async def test_the_mcp_sdk_oauth_client_signs_in_and_gets_a_token_for_the_resource(
    provider: OpenIDProvider,
) -> None:
    """The SDK's OAuthClientProvider end to end: discovery from a 401, registration,
    authorization code + PKCE with the resource, the headless user at the login and
    consent forms, the code exchange; the token it then sends is for that resource."""
    handler = type("Resource", (ProtectedResource,), {"issuer": provider.issuer})
    with serve_threaded(handler) as resource:
        url = f"http://127.0.0.1:{resource.port}/mcp"
        user = provider.user("alice")
        storage = MemoryTokenStorage()
        auth = OAuthClientProvider(
            server_url=url,
            client_metadata=OAuthClientMetadata(
                redirect_uris=[AnyUrl("http://127.0.0.1:3030/callback")],
                token_endpoint_auth_method="none",
                client_name="crank-test-mcp-sdk",
            ),
            storage=storage,
            redirect_handler=user.redirect_handler,
            callback_handler=user.callback_handler,
        )
        async with httpx2.AsyncClient(auth=auth, timeout=20) as http:
            response = await http.get(url)
    assert response.status_code == 200, response.text
    header, claims = jwt_parts(response.json()["token"])
    assert header["typ"] == "at+jwt"
    assert (claims["iss"], claims["aud"], claims["sub"]) == (provider.issuer, url, "alice")
    assert claims["scope"] == "crank:read"
    assert storage.tokens is not None
    assert storage.tokens.refresh_token is not None
