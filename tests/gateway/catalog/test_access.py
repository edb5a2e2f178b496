"""An agent's access as the snapshot prepares it (mcp_gateway.catalog.access):
its canonical URL and metadata URL behind CRANK_PUBLIC_URL and a proxy prefix,
no tokens without a public URL, and the same access object for equal inputs."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mcp_gateway.catalog.access import KEYS_ONLY, AccessInputs, access_inputs, agent_access
from mcp_gateway.transport.resource_metadata import PATH
from shared.identity.fetching import FetchFailed
from shared.identity.issuers import DEFAULT_ALGORITHMS
from shared.identity.jwks_cache import JwksCache
from shared.identity.metadata_cache import MetadataCache
from shared.identity.provider_sets import IdentityParts, ProviderSettings

CORP = ProviderSettings(
    name="corp",
    issuer="https://id.example.com/realms/staff",
    algorithms=DEFAULT_ALGORITHMS,
    token_types=("at+jwt",),
    subject_claim="sub",
    groups_claim=None,
    leeway_s=30,
)
PUBLISHED: dict[str, Any] = {
    "title": "Orders",
    "auth": {"providers": ["corp"], "scopes": ["orders:read"]},
}


async def _never(url: str) -> bytes:
    raise FetchFailed("no fetch in these tests")


PARTS = IdentityParts(MetadataCache(_never), JwksCache(_never))


def _inputs(
    public_url: str, prefix: str = "", published: dict[str, Any] | None = None
) -> AccessInputs:
    return access_inputs(
        published or PUBLISHED,
        "shop",
        "orders",
        {"corp": CORP},
        frozenset({"orders:write"}),
        public_url,
        prefix,
    )


@pytest.mark.parametrize(
    ("prefix", "resource", "metadata_url"),
    [
        (
            "",
            "https://crank.example.com/mcp/v1/shop/orders",
            "https://crank.example.com/.well-known/oauth-protected-resource/mcp/v1/shop/orders",
        ),
        (
            "/crank/",
            "https://crank.example.com/crank/v1/shop/orders",
            "https://crank.example.com/.well-known/oauth-protected-resource/crank/v1/shop/orders",
        ),
    ],
)
def test_the_canonical_url_follows_the_public_url_and_the_prefix(
    prefix: str, resource: str, metadata_url: str
) -> None:
    access = agent_access(_inputs("https://crank.example.com/", prefix), None, PARTS)
    assert (access.resource, access.metadata_url) == (resource, metadata_url)
    assert json.loads(access.metadata) == {
        "resource": resource,
        "authorization_servers": ["https://id.example.com/realms/staff"],
        "scopes_supported": ["orders:read", "orders:write"],
        "bearer_methods_supported": ["header"],
        "resource_name": "Orders",
    }
    assert access.challenge == f'Bearer resource_metadata="{metadata_url}", scope="orders:read"'
    # The gateway answers the metadata at that path, whatever the proxy's prefix.
    path = metadata_url.removeprefix("https://crank.example.com")
    match = PATH.fullmatch(path)
    assert match is not None
    assert match.groups() == ("shop", "orders")


def test_without_a_public_url_an_agent_takes_keys_only() -> None:
    assert agent_access(_inputs(""), None, PARTS) is KEYS_ONLY
    auth: dict[str, Any] = {**PUBLISHED["auth"], "agent_keys": False}
    keyless = {**PUBLISHED, "auth": auth}
    refused = agent_access(_inputs("", published=keyless), None, PARTS)
    assert (refused.keys, refused.providers, refused.metadata) == (False, None, b"")


def test_equal_inputs_keep_the_very_same_access_and_its_remembered_tokens() -> None:
    first = agent_access(_inputs("https://crank.example.com"), None, PARTS)
    assert agent_access(_inputs("https://crank.example.com"), first, PARTS) is first
    other = agent_access(_inputs("https://crank.example.com", "/crank"), first, PARTS)
    assert other is not first
    assert other.providers is not first.providers


def test_a_refusal_description_cannot_break_out_of_its_quoted_string() -> None:
    access = agent_access(_inputs("https://crank.example.com"), None, PARTS)
    header = access.challenge_for("invalid_token", 'x", scope="admin\r\nSet-Cookie: a')
    assert "\r" not in header
    assert "\n" not in header
    assert header.count('"') % 2 == 0
    assert 'scope="admin' not in header
