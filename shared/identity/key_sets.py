"""A provider's published JWKS, parsed once into the keys that may verify signatures."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import msgspec
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, JWKRegistry, Key, OKPKey, RSAKey

# Key types an asymmetric algorithm can use; "oct" (a shared secret) never.
_KEY_TYPES = {"RSA": RSAKey, "EC": ECKey, "OKP": OKPKey}
MAX_KEYS = 100  # a JWKS with more is refused whole (parsing each costs)


class KeySetInvalid(ValueError):
    """The document is no usable JWKS."""


@dataclass(frozen=True, slots=True)
class VerificationKeys:
    """The signature keys of one JWKS: by ``kid``, and the kid-less ones."""

    by_kid: Mapping[str, Key]
    without_kid: tuple[Key, ...]

    def __len__(self) -> int:
        return len(self.by_kid) + len(self.without_kid)

    def find(self, kid: str | None) -> Key | None:
        """The key named ``kid``; with no kid, the only key if there is exactly one."""
        if kid is not None:
            return self.by_kid.get(kid)
        if len(self) == 1:
            return next(iter(self.by_kid.values()), None) or self.without_kid[0]
        return None


def parse_jwks(body: bytes) -> VerificationKeys:
    """The public signature keys of a JWKS document. Keys for encryption
    (``use: enc``), symmetric keys and key types not understood are skipped
    (RFC 7517 section 5); a set with no usable key is refused."""
    try:
        document = msgspec.json.decode(body)
    except msgspec.DecodeError as exc:
        raise KeySetInvalid("not JSON") from exc
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise KeySetInvalid('no "keys" array')
    entries: list[Any] = document["keys"]
    if len(entries) > MAX_KEYS:
        raise KeySetInvalid(f"more than {MAX_KEYS} keys")
    by_kid: dict[str, Key] = {}
    without_kid: list[Key] = []
    for entry in entries:
        key = _signature_key(entry)
        if key is None:
            continue
        kid = entry.get("kid")
        if isinstance(kid, str):
            by_kid.setdefault(kid, key)  # a repeated kid: the first wins, as IdPs list newest first
        else:
            without_kid.append(key)
    if not by_kid and not without_kid:
        raise KeySetInvalid("no public signature key")
    return VerificationKeys(by_kid, tuple(without_kid))


def _signature_key(entry: object) -> Key | None:
    if not isinstance(entry, dict) or entry.get("kty") not in _KEY_TYPES:
        return None
    if entry.get("use", "sig") != "sig":
        return None
    ops = entry.get("key_ops")
    if isinstance(ops, list) and "verify" not in ops:
        return None
    # Only the public members: a private part published by mistake is dropped.
    public = {k: v for k, v in entry.items() if k not in _PRIVATE_MEMBERS}
    try:
        return JWKRegistry.import_key(public)
    except (JoseError, ValueError, TypeError):
        return None


_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
