"""Validation results by token digest: a repeat call costs a hash, a dict look-up
and an expiry check (docs/architecture.md, "Identity")."""

from __future__ import annotations

import functools
import hashlib
from collections import OrderedDict
from dataclasses import dataclass

from shared.identity.access_tokens import Principal
from shared.identity.refusals import RefusalReason, TokenRefused

DEFAULT_MAX_ACCEPTED = 10_000
DEFAULT_MAX_REFUSED = 1_000
DEFAULT_ACCEPTED_CAP_S = 3_600.0  # a token valid for days is still re-checked hourly
DEFAULT_REFUSED_TTL_S = 10.0


def token_digest(token: str, audience: str) -> bytes:
    """SHA-256 of the audience and the token: the token itself is never kept.

    The hash of ``audience\0`` is made once per audience and copied: a copy is
    cheaper than a new OpenSSL context, and the token is hashed without being
    joined to the audience first (docs/architecture.md, "Identity")."""
    digest = _audience_hash(audience).copy()
    digest.update(token.encode())
    return digest.digest()


@functools.lru_cache(maxsize=1024)  # audiences are agents' URLs: as many as agents
def _audience_hash(audience: str) -> hashlib._Hash:
    return hashlib.sha256(f"{audience}\0".encode())


@dataclass(frozen=True, slots=True)
class _Refusal:
    # The reason, not the exception: re-raising one object would grow its traceback.
    reason: RefusalReason
    detail: str
    until: float


class ResultCache:
    """Two bounded LRU maps: accepted principals until min(exp, now + cap), and
    lasting refusals for a few seconds (a flood of one bad token costs a hash
    each). Separate, so a flood of distinct bad tokens never evicts good results."""

    def __init__(
        self,
        *,
        max_accepted: int = DEFAULT_MAX_ACCEPTED,
        max_refused: int = DEFAULT_MAX_REFUSED,
        accepted_cap_s: float = DEFAULT_ACCEPTED_CAP_S,
        refused_ttl_s: float = DEFAULT_REFUSED_TTL_S,
    ) -> None:
        self._accepted: OrderedDict[bytes, tuple[Principal, float]] = OrderedDict()
        self._refused: OrderedDict[bytes, _Refusal] = OrderedDict()
        self._max_accepted = max_accepted
        self._max_refused = max_refused
        self._cap_s = accepted_cap_s
        self._refused_ttl_s = refused_ttl_s

    def __len__(self) -> int:
        return len(self._accepted) + len(self._refused)

    def get(self, digest: bytes, now: float) -> Principal | None:
        """The remembered principal, or raises the remembered refusal; None: unknown."""
        hit = self._accepted.get(digest)
        if hit is not None:
            if now < hit[1]:
                self._accepted.move_to_end(digest)
                return hit[0]
            del self._accepted[digest]
        refusal = self._refused.get(digest)
        if refusal is not None:
            if now < refusal.until:
                raise TokenRefused(refusal.reason, refusal.detail)
            del self._refused[digest]
        return None

    def accept(
        self, digest: bytes, principal: Principal, now: float, *, cap_s: float | None = None
    ) -> None:
        """Remember until the token expires, at most ``cap_s`` (the cache's cap by default)."""
        # Wall-clock ``now``, as exp is: the entry ends when the token does.
        cap = self._cap_s if cap_s is None else min(cap_s, self._cap_s)
        self._accepted[digest] = (principal, min(principal.expires_at, now + cap))
        self._accepted.move_to_end(digest)
        while len(self._accepted) > self._max_accepted:
            self._accepted.popitem(last=False)

    def refuse(self, digest: bytes, error: TokenRefused, now: float) -> None:
        self._refused[digest] = _Refusal(error.reason, error.detail, now + self._refused_ttl_s)
        self._refused.move_to_end(digest)
        while len(self._refused) > self._max_refused:
            self._refused.popitem(last=False)
