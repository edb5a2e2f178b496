"""The key format: ``crk_<kind>_<43 base62 chars of 256 random bits><6 char checksum>``.

The visible kind prefix tells a leaked key's purpose at a glance (and lets
secret scanners match it); the CRC32 checksum lets Crank refuse a mistyped
key without a database look-up.
"""

from __future__ import annotations

import secrets
import zlib
from enum import StrEnum

KEY_PREFIX = "crk_"  # every key's; an OAuth access token never starts so (docs/architecture.md)
_ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
_BODY_LENGTH = 43  # 256 bits in base62
_CHECKSUM_LENGTH = 6
# How much of the key listings show (kind prefix + 8 characters: not enough to guess).
DISPLAY_PREFIX_BODY = 8


class KeyKind(StrEnum):
    """Agent keys call tools, approval keys decide approvals, admin tokens call the admin API."""

    AGENT = "agent"
    APPROVAL = "approval"
    ADMIN = "admin"


def _base62(number: int, width: int) -> str:
    chars = []
    while number:
        number, rest = divmod(number, 62)
        chars.append(_ALPHABET[rest])
    return "".join(reversed(chars)).rjust(width, "0")


def _checksum(text: str) -> str:
    return _base62(zlib.crc32(text.encode()), _CHECKSUM_LENGTH)


def generate_key(kind: KeyKind) -> str:
    """A new random key of ``kind``; the caller stores only its hash and shows it once."""
    body = _base62(secrets.randbits(256), _BODY_LENGTH)
    head = f"crk_{kind.value}_{body}"
    return head + _checksum(head)


def parse_key(key: str) -> KeyKind | None:
    """The key's kind when its shape and checksum are right, else None."""
    for kind in KeyKind:
        start = f"crk_{kind.value}_"
        if key.startswith(start):
            if len(key) != len(start) + _BODY_LENGTH + _CHECKSUM_LENGTH:
                return None
            head, checksum = key[:-_CHECKSUM_LENGTH], key[-_CHECKSUM_LENGTH:]
            if not all(c in _ALPHABET for c in key[len(start) :]):
                return None
            return kind if secrets.compare_digest(_checksum(head), checksum) else None
    return None


def display_prefix(key: str) -> str:
    """The part of a key that listings and records show; raises ValueError for a non-key."""
    kind = parse_key(key)
    if kind is None:
        raise ValueError("not a Crank key")
    return key[: len(f"crk_{kind.value}_") + DISPLAY_PREFIX_BODY]
