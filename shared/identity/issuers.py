"""A trusted identity provider's settings, checked when built."""

from __future__ import annotations

from dataclasses import dataclass, field
from urllib.parse import urlsplit

# Asymmetric signatures only: an HMAC key would be a secret shared with the IdP,
# and "none" is no signature (docs/architecture.md, "Identity").
ASYMMETRIC_ALGORITHMS: frozenset[str] = frozenset(
    {
        *("RS256", "RS384", "RS512", "PS256", "PS384", "PS512"),
        *("ES256", "ES384", "ES512", "EdDSA", "Ed25519"),
    }
)
DEFAULT_ALGORITHMS: tuple[str, ...] = (
    "RS256",
    "RS384",
    "RS512",
    "PS256",
    "PS384",
    "PS512",
    "ES256",
    "ES384",
    "EdDSA",  # RFC 9864 deprecates the name for Ed25519, but IdPs still sign with it
    "Ed25519",
)
TOKEN_TYPES: frozenset[str] = frozenset({"at+jwt", "JWT"})
MAX_LEEWAY_S = 300
_LOOPBACK_HOSTS = frozenset({"localhost", "127.0.0.1", "::1"})


class IssuerConfigError(ValueError):
    """A trusted issuer's settings are unusable; the message names the field."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Introspection:
    """Where and as whom opaque tokens are introspected (RFC 7662), with HTTP Basic."""

    endpoint: str
    client_id: str
    client_secret: str = field(repr=False)  # never in a repr, so never in a log line

    def __post_init__(self) -> None:
        _check_url("introspection.endpoint", self.endpoint)
        if not self.client_id or not self.client_secret:
            raise IssuerConfigError("introspection: client_id and client_secret required")


@dataclass(frozen=True, slots=True, kw_only=True)
class TrustedIssuer:
    """An IdP whose access tokens an agent accepts.

    ``token_types``: ``at+jwt`` (RFC 9068) and/or ``JWT`` (IdPs that type their
    access tokens as plain JWTs; also accepts a token with no ``typ``).
    """

    issuer: str  # compared byte for byte with the token's iss
    jwks_uri: str | None = None  # JWT access tokens; None: opaque tokens only
    introspection: Introspection | None = None  # opaque tokens
    algorithms: tuple[str, ...] = DEFAULT_ALGORITHMS
    token_types: tuple[str, ...] = ("at+jwt",)
    subject_claim: str = "sub"
    groups_claim: str | None = None
    leeway_s: int = 30

    def __post_init__(self) -> None:
        _check_url("issuer", self.issuer)
        if self.jwks_uri is None and self.introspection is None:
            raise IssuerConfigError("jwks_uri: required unless introspection is set")
        if self.jwks_uri is not None:
            _check_url("jwks_uri", self.jwks_uri)
        if not self.algorithms:
            raise IssuerConfigError("algorithms: name at least one")
        if refused := sorted(set(self.algorithms) - ASYMMETRIC_ALGORITHMS):
            raise IssuerConfigError(
                f"algorithms: {', '.join(refused)} not allowed; "
                f"use asymmetric ones: {', '.join(sorted(ASYMMETRIC_ALGORITHMS))}"
            )
        if not self.token_types or not set(self.token_types) <= TOKEN_TYPES:
            raise IssuerConfigError("token_types: at+jwt and/or JWT")
        if not self.subject_claim:
            raise IssuerConfigError("subject_claim: must not be empty")
        if not 0 <= self.leeway_s <= MAX_LEEWAY_S:
            raise IssuerConfigError(f"leeway_s: 0 to {MAX_LEEWAY_S} seconds")


def _check_url(field: str, value: str) -> None:
    parts = urlsplit(value)
    if parts.scheme not in ("https", "http") or not parts.hostname:
        raise IssuerConfigError(f"{field}: an absolute https URL, got {value!r}")
    # Plain http only to this machine (a local IdP, the tests); elsewhere keys and
    # metadata could be swapped on the way.
    if parts.scheme == "http" and parts.hostname not in _LOOPBACK_HOSTS:
        raise IssuerConfigError(f"{field}: https required, got {value!r}")
    if parts.query or parts.fragment:
        raise IssuerConfigError(f"{field}: no query or fragment")
