"""Where an issuer publishes its metadata, and the metadata checked against it:
RFC 8414 (OAuth) and OpenID Connect Discovery."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import msgspec

from shared.identity.fetching import Fetch, FetchFailed


class DiscoveryFailed(Exception):
    """No metadata document could be fetched, or none is the issuer's."""


@dataclass(frozen=True, slots=True)
class ProviderMetadata:
    issuer: str
    jwks_uri: str
    introspection_endpoint: str | None


def metadata_urls(issuer: str) -> tuple[str, str]:
    """RFC 8414 section 3.1 (the well-known segment inserted before the issuer's
    path), then OpenID Connect Discovery (appended to the issuer)."""
    parts = urlsplit(issuer)
    path = parts.path.rstrip("/")
    oauth = urlunsplit(
        (parts.scheme, parts.netloc, f"/.well-known/oauth-authorization-server{path}", "", "")
    )
    openid = f"{issuer.rstrip('/')}/.well-known/openid-configuration"
    return oauth, openid


def read_metadata(body: bytes, issuer: str) -> ProviderMetadata:
    """The document's issuer must equal ``issuer`` byte for byte (RFC 8414 section
    3.3): otherwise another provider's metadata could name its own keys."""
    try:
        document = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise DiscoveryFailed("metadata is not JSON") from exc
    if not isinstance(document, dict):
        raise DiscoveryFailed("metadata is no JSON object")
    if document.get("issuer") != issuer:
        raise DiscoveryFailed(f"metadata names issuer {str(document.get('issuer'))[:200]!r}")
    jwks_uri = document.get("jwks_uri")
    if not isinstance(jwks_uri, str):
        raise DiscoveryFailed("metadata has no jwks_uri")
    introspection = document.get("introspection_endpoint")
    return ProviderMetadata(
        issuer, jwks_uri, introspection if isinstance(introspection, str) else None
    )


async def discover(issuer: str, fetch: Fetch) -> ProviderMetadata:
    """The first metadata document that answers, checked against ``issuer``."""
    failures: list[str] = []
    for url in metadata_urls(issuer):
        try:
            body = await fetch(url)
        except FetchFailed as exc:
            failures.append(f"{url}: {exc}")
            continue
        return read_metadata(body, issuer)
    raise DiscoveryFailed("; ".join(failures))
