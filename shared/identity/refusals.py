"""Why a token was refused: a closed set of reasons, one exception."""

from __future__ import annotations

from typing import Literal, get_args

RefusalReason = Literal[
    "malformed",  # not a compact JWS with JSON header and claims
    "forbidden_header",  # jwk, jku, x5u, x5c or any crit (RFC 8725 3.10)
    "algorithm_not_allowed",  # none, HMAC, or not in the issuer's list
    "wrong_type",  # typ not one the issuer is configured for (RFC 8725 3.11)
    "missing_key_id",  # no kid while the issuer publishes more than one key
    "unknown_key",  # kid not in the key set, even after a refetch
    "keys_unavailable",  # no key set was ever fetched and the IdP is unreachable
    "inactive",  # introspection answered active: false (RFC 7662)
    "introspection_unavailable",  # the endpoint failed, or introspections are over budget
    "bad_signature",
    "wrong_issuer",
    "wrong_audience",  # aud lacks this agent's canonical URL (RFC 8707)
    "missing_claim",  # exp, iss, aud or the subject claim absent
    "expired",
    "not_yet_valid",  # nbf in the future beyond the leeway
    "issued_in_future",  # iat in the future beyond the leeway
]
REFUSAL_REASONS: tuple[RefusalReason, ...] = get_args(RefusalReason)

# Reasons that stay true for the same token (the result cache may remember them
# briefly); the others can change with time or with the IdP's key set.
LASTING_REASONS: frozenset[RefusalReason] = frozenset(REFUSAL_REASONS) - {
    "unknown_key",
    "keys_unavailable",
    "introspection_unavailable",
    "not_yet_valid",
}


class TokenRefused(Exception):
    """The token is not accepted; ``reason`` says why (never the token itself)."""

    def __init__(self, reason: RefusalReason, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason: RefusalReason = reason
        self.detail = detail
