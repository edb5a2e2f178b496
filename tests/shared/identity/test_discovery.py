"""Provider metadata (shared.identity.discovery): the two well-known URLs, and the
issuer in the document compared byte for byte, fetched from a loopback IdP."""

from __future__ import annotations

import json

import pytest

from shared.engine.outbound import UpstreamExecutor
from shared.engine.ssrf import AddressPolicy, parse_allowlist
from shared.identity.discovery import DiscoveryFailed, discover, metadata_urls
from shared.identity.fetching import executor_fetch
from tests.support.identity import serve_jwks


@pytest.mark.parametrize(
    ("issuer", "oauth", "openid"),
    [
        (
            "https://idp.example",
            "https://idp.example/.well-known/oauth-authorization-server",
            "https://idp.example/.well-known/openid-configuration",
        ),
        (
            "https://idp.example/realms/acme",
            "https://idp.example/.well-known/oauth-authorization-server/realms/acme",
            "https://idp.example/realms/acme/.well-known/openid-configuration",
        ),
        (
            "https://idp.example/tenant/",
            "https://idp.example/.well-known/oauth-authorization-server/tenant",
            "https://idp.example/tenant/.well-known/openid-configuration",
        ),
    ],
)
def test_metadata_urls(issuer: str, oauth: str, openid: str) -> None:
    assert metadata_urls(issuer) == (oauth, openid)


async def test_discovery_falls_back_to_openid_and_checks_the_issuer() -> None:
    async with serve_jwks(b"{}") as server:
        issuer = f"{server.base()}/realms/acme"
        policy = AddressPolicy(allowlist=parse_allowlist([f"127.0.0.1:{server.port}"]))
        async with UpstreamExecutor(policy) as executor:
            fetch = executor_fetch(executor, timeout_ms=2000)
            # Only the OpenID document exists: the RFC 8414 URL answers 404.
            server.paths["/realms/acme/.well-known/openid-configuration"] = json.dumps(
                {"issuer": issuer, "jwks_uri": f"{issuer}/certs"}
            ).encode()
            metadata = await discover(issuer, fetch)
            assert (metadata.jwks_uri, server.requests) == (f"{issuer}/certs", 2)
            # A document naming another issuer (even by a trailing slash) is refused.
            server.paths["/.well-known/oauth-authorization-server/realms/acme"] = json.dumps(
                {"issuer": issuer + "/", "jwks_uri": "https://attacker.example/jwks"}
            ).encode()
            with pytest.raises(DiscoveryFailed, match="names issuer"):
                await discover(issuer, fetch)
            server.up = False
            with pytest.raises(DiscoveryFailed, match="HTTP 503"):
                await discover(issuer, fetch)
