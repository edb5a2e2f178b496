"""JWT access tokens (RFC 9068) checked locally: header, key, signature, claims.

Pure and synchronous: the key set comes from the caller (``jwks_cache``), the
result cache and the refetch on an unknown key are ``validator``'s. The checks
and why (RFC 8725): docs/architecture.md, "Identity".
"""

from __future__ import annotations

import binascii
import json
import warnings
from dataclasses import dataclass
from typing import Any

from joserfc.errors import (
    BadSignatureError,
    ExpiredTokenError,
    InvalidClaimError,
    InvalidKeyCurveError,
    InvalidKeyTypeError,
    JoseError,
    MissingClaimError,
    SecurityWarning,
)
from joserfc.jwk import Key
from joserfc.jws import JWSRegistry, deserialize_compact
from joserfc.jwt import JWTClaimsRegistry
from joserfc.util import urlsafe_b64decode

from shared.identity.issuers import TrustedIssuer
from shared.identity.key_sets import VerificationKeys
from shared.identity.refusals import RefusalReason, TokenRefused

MAX_TOKEN_CHARS = 16 * 1024  # far above any IdP's access token; refused before any parsing
# Headers that would let the token choose its own key or demand processing we
# do not do (RFC 8725 sections 3.10 and 2.8; RFC 7515 section 4.1.11).
FORBIDDEN_HEADERS = frozenset({"jwk", "jku", "x5u", "x5c", "crit"})
# joserfc's claim errors by claim; any other invalid claim is a malformed token.
_CLAIM_REFUSALS: dict[str, RefusalReason] = {
    "iss": "wrong_issuer",
    "aud": "wrong_audience",
    "nbf": "not_yet_valid",
    "iat": "issued_in_future",
}


@dataclass(frozen=True, slots=True)
class Principal:
    """Who called: issuer + subject identify the person or client."""

    issuer: str
    subject: str
    display_name: str | None  # name, else email, else preferred_username
    client_id: str | None  # client_id, else azp, cid or appid
    groups: tuple[str, ...]
    scopes: frozenset[str]  # scope (space-separated) or scp (list or string)
    expires_at: float


@dataclass(frozen=True, slots=True)
class TokenHeader:
    """The protected header, checked against the issuer, before any key is looked up."""

    alg: str
    kid: str | None


def read_header(token: str, issuer: TrustedIssuer) -> TokenHeader:
    """Parse and check the header: shape, forbidden members, algorithm, type."""
    header = _decode_header(token)
    if forbidden := sorted(FORBIDDEN_HEADERS & header.keys()):
        raise TokenRefused("forbidden_header", ", ".join(forbidden))
    alg = header.get("alg")
    if not isinstance(alg, str) or alg not in issuer.algorithms:
        # none and HS* never reach here: TrustedIssuer refuses them in its list.
        raise TokenRefused("algorithm_not_allowed", str(alg)[:20])
    if not _type_accepted(header.get("typ"), issuer.token_types):
        raise TokenRefused("wrong_type", str(header.get("typ"))[:40])
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise TokenRefused("malformed", "kid is no string")
    return TokenHeader(alg, kid)


def find_key(header: TokenHeader, keys: VerificationKeys) -> Key:
    """The key the header names; refuses a kid-less token when the set has several."""
    key = keys.find(header.kid)
    if key is not None:
        return key
    if header.kid is None:
        raise TokenRefused("missing_key_id", f"{len(keys)} keys published")
    raise TokenRefused("unknown_key", header.kid[:80])


def verify(
    token: str,
    header: TokenHeader,
    key: Key,
    issuer: TrustedIssuer,
    audience: str,
    now: float,
) -> Principal:
    """Signature with ``key`` under the header's algorithm only, then the claims."""
    if key.alg is not None and key.alg != header.alg:
        raise TokenRefused("algorithm_not_allowed", f"key is for {key.alg}")
    try:
        if header.alg == "EdDSA":
            with warnings.catch_warnings():
                # joserfc warns that RFC 9864 deprecates the name; the signature is sound.
                warnings.simplefilter("ignore", SecurityWarning)
                signed = deserialize_compact(token, key, registry=_registry(header.alg))
        else:
            signed = deserialize_compact(token, key, registry=_registry(header.alg))
    except BadSignatureError as exc:
        raise TokenRefused("bad_signature") from exc
    except (InvalidKeyTypeError, InvalidKeyCurveError) as exc:
        raise TokenRefused("algorithm_not_allowed", "key does not fit the algorithm") from exc
    except JoseError as exc:
        raise TokenRefused("malformed", exc.error) from exc
    claims = _decode_claims(signed.payload)
    check_claims(claims, issuer, audience, now)
    return principal_from(claims, issuer, float(claims["exp"]))


def validate(
    token: str, issuer: TrustedIssuer, audience: str, keys: VerificationKeys, now: float
) -> Principal:
    """All checks at once; raises ``TokenRefused``."""
    header = read_header(token, issuer)
    return verify(token, header, find_key(header, keys), issuer, audience, now)


def looks_like_jwt(token: str) -> bool:
    """Three parts and a JSON header with ``alg``: checked as a JWT, never introspected."""
    try:
        return "alg" in _decode_header(token)
    except TokenRefused:
        return False


def unverified_issuer(token: str) -> str:
    """The claims' ``iss``, unverified: only for choosing whose keys to verify with."""
    iss = _decode_part(token, 1, "claims").get("iss")
    if not isinstance(iss, str):
        raise TokenRefused("missing_claim", "iss")
    return iss


def _decode_header(token: str) -> dict[str, Any]:
    return _decode_part(token, 0, "header")


def _decode_part(token: str, index: int, name: str) -> dict[str, Any]:
    if len(token) > MAX_TOKEN_CHARS:
        raise TokenRefused("malformed", "too long")
    parts = token.split(".")
    if len(parts) != 3:  # five would be JWE: encrypted access tokens are not supported
        raise TokenRefused("malformed", f"{len(parts)} parts")
    try:
        value = json.loads(urlsafe_b64decode(parts[index].encode("ascii")))
    except (UnicodeError, binascii.Error, ValueError) as exc:
        raise TokenRefused("malformed", name) from exc
    if not isinstance(value, dict):
        raise TokenRefused("malformed", name)
    return value


def _type_accepted(typ: object, accepted: tuple[str, ...]) -> bool:
    # Media types compare case-insensitively, "application/" may be left out (RFC 7515 4.1.9).
    if typ is None:
        return "JWT" in accepted
    if not isinstance(typ, str):
        return False
    name = typ.lower().removeprefix("application/")
    return any(name == t.lower() for t in accepted)


# username: RFC 7662's name for the person in an introspection answer.
_DISPLAY_CLAIMS = ("name", "email", "preferred_username", "username")
_CLIENT_CLAIMS = ("client_id", "azp", "cid", "appid")  # RFC 9068, OpenID, Okta, Entra v1
_REGISTRIES: dict[str, JWSRegistry] = {}


def _registry(alg: str) -> JWSRegistry:
    # One algorithm per registry: the key can only be used the way the header
    # (already checked against the issuer's list) says. Non-critical headers
    # joserfc does not know are ignored, as RFC 7515 says.
    registry = _REGISTRIES.get(alg)
    if registry is None:
        registry = _REGISTRIES[alg] = JWSRegistry(algorithms=[alg], strict_check_header=False)
        # joserfc's 512-byte header cap would refuse real IdPs' headers with
        # x5t, nonce and long kids; the whole token is capped at MAX_TOKEN_CHARS.
        registry.max_header_length = 4096
    return registry


def _decode_claims(payload: bytes | None) -> dict[str, Any]:
    try:
        claims = json.loads(payload or b"")
    except ValueError as exc:
        raise TokenRefused("malformed", "claims") from exc
    if not isinstance(claims, dict):
        raise TokenRefused("malformed", "claims")
    return claims


def check_claims(
    claims: dict[str, Any],
    issuer: TrustedIssuer,
    audience: str,
    now: float,
    *,
    introspected: bool = False,
) -> None:
    """iss exact, aud holding ``audience``, exp/nbf/iat with the leeway. An
    introspection answer may leave out iss and exp (RFC 7662); a JWT may not."""
    registry = JWTClaimsRegistry(
        now=int(now),
        leeway=issuer.leeway_s,
        iss={"essential": not introspected, "value": issuer.issuer},
        aud={"essential": True, "value": audience},
        exp={"essential": not introspected},
    )
    try:
        registry.validate(claims)
    except MissingClaimError as exc:
        raise TokenRefused("missing_claim", exc.claim) from exc
    except ExpiredTokenError as exc:
        raise TokenRefused("expired") from exc
    except InvalidClaimError as exc:
        raise TokenRefused(_CLAIM_REFUSALS.get(exc.claim, "malformed"), exc.claim) from exc


def principal_from(claims: dict[str, Any], issuer: TrustedIssuer, expires_at: float) -> Principal:
    """The principal of checked claims (a JWT's, or an introspection answer's)."""
    subject = claims.get(issuer.subject_claim)
    if not isinstance(subject, str) or not subject:
        raise TokenRefused("missing_claim", issuer.subject_claim)
    display = next((v for c in _DISPLAY_CLAIMS if isinstance(v := claims.get(c), str)), None)
    client_id = next((v for c in _CLIENT_CLAIMS if isinstance(v := claims.get(c), str)), None)
    return Principal(
        issuer=issuer.issuer,
        subject=subject,
        display_name=display,
        client_id=client_id,
        groups=_strings(claims, issuer.groups_claim) if issuer.groups_claim else (),
        scopes=frozenset(_strings(claims, "scope") + _strings(claims, "scp")),
        expires_at=expires_at,
    )


def _strings(claims: dict[str, Any], name: str) -> tuple[str, ...]:
    """A claim that is a space-separated string or a list of strings, as a tuple."""
    value = claims.get(name)
    if value is None:
        return ()
    if isinstance(value, str):
        return tuple(value.split())
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise TokenRefused("malformed", name)
