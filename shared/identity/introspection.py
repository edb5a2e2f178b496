"""Opaque access tokens asked of the issuer's introspection endpoint (RFC 7662).

Only ``validator`` calls this, for a token that is no JWT, and only for the one
issuer configured with an endpoint (a token is never shown to an IdP that may
not have issued it). Its result is cached like a JWT's, for a shorter time
(docs/architecture.md, "Identity").
"""

from __future__ import annotations

import asyncio
import base64
import re
from typing import Any
from urllib.parse import quote, urlencode

import msgspec

from shared.identity.access_tokens import Principal, check_claims, principal_from
from shared.identity.fetching import FetchFailed, Post
from shared.identity.issuers import Introspection, TrustedIssuer
from shared.identity.refusals import TokenRefused

# RFC 6750's b64token, bounded: anything else is refused before it leaves Crank.
_OPAQUE_TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]{1,4096}=*")
DEFAULT_TIMEOUT_S = 5.0


def opaque_token_shape_ok(token: str) -> bool:
    return _OPAQUE_TOKEN.fullmatch(token) is not None


async def introspect(
    token: str,
    issuer: TrustedIssuer,
    audience: str,
    post: Post,
    now: float,
    *,
    cache_s: float,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> Principal:
    """The principal of an active token for ``audience``; raises ``TokenRefused``.
    Without ``exp`` in the answer the principal expires after ``cache_s``."""
    endpoint = issuer.introspection
    if endpoint is None:
        raise TokenRefused("malformed", "not a JWT, and the issuer introspects nothing")
    if not opaque_token_shape_ok(token):
        raise TokenRefused("malformed", "not a bearer token")
    body = urlencode({"token": token, "token_type_hint": "access_token"}).encode()
    try:
        async with asyncio.timeout(timeout_s):
            answer = await post(endpoint.endpoint, body, (("authorization", _basic(endpoint)),))
    except (FetchFailed, TimeoutError) as exc:
        raise TokenRefused("introspection_unavailable", _describe(exc)) from exc
    claims = _decode(answer)
    if claims.get("active") is not True:
        raise TokenRefused("inactive")
    check_claims(claims, issuer, audience, now, introspected=True)
    exp = claims.get("exp")
    return principal_from(claims, issuer, float(exp) if exp is not None else now + cache_s)


def _basic(endpoint: Introspection) -> str:
    # RFC 6749 section 2.3.1: each part form-encoded before the Basic encoding.
    pair = f"{quote(endpoint.client_id, safe='')}:{quote(endpoint.client_secret, safe='')}"
    return "Basic " + base64.b64encode(pair.encode()).decode()


def _decode(answer: bytes) -> dict[str, Any]:
    try:
        claims = msgspec.json.decode(answer)
    except msgspec.DecodeError as exc:
        raise TokenRefused("introspection_unavailable", "answer is not JSON") from exc
    if not isinstance(claims, dict):
        raise TokenRefused("introspection_unavailable", "answer is no JSON object")
    return claims


def _describe(exc: Exception) -> str:
    return "timed out" if isinstance(exc, TimeoutError) else str(exc)[:200]
