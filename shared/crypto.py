"""Secrets at rest (AES-256-GCM) and key hashing (HMAC-SHA-256).

Every key is derived from ``CRANK_SECRET_KEY`` with HKDF under a label of its
own (``derive_key``: secrets, key hashing, confirmation tokens, elicitation
request states), so one operator secret never serves two purposes. Each encrypted value
stores the id of the key that sealed it; ``CRANK_SECRET_KEY_PREVIOUS`` keeps old
keys readable during a rotation.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from dataclasses import dataclass

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

_MIN_SECRET_LENGTH = 32


def b64url_encode(data: bytes) -> str:
    """URL-safe base64 without padding: signed ids, tokens and cursors."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def b64url_decode(text: str) -> bytes:
    """The inverse of b64url_encode; raises ValueError (binascii.Error) on bad input."""
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


class CryptoError(Exception):
    """A value cannot be decrypted with any configured key."""


def derive_key(secret: str, label: bytes) -> bytes:
    """A 32-byte key for one purpose (``label``), derived from ``CRANK_SECRET_KEY``."""
    if len(secret) < _MIN_SECRET_LENGTH:
        raise ValueError(f"CRANK_SECRET_KEY must be at least {_MIN_SECRET_LENGTH} characters")
    return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=label).derive(secret.encode())


@dataclass(frozen=True, slots=True)
class Sealed:
    """A secret as stored: AES-GCM ciphertext, its nonce and the id of the key that sealed it."""

    ciphertext: bytes
    nonce: bytes
    key_id: str


class SecretBox:
    """Encrypts workspace secrets; the associated data binds a value to its place."""

    def __init__(self, secret_key: str, previous: tuple[str, ...] = ()) -> None:
        self._current_id, current = self._key(secret_key)
        self._keys = {self._current_id: AESGCM(current)}
        for old in previous:
            key_id, key = self._key(old)
            self._keys.setdefault(key_id, AESGCM(key))

    @property
    def current_key_id(self) -> str:
        """The id of the key that seals new values."""
        return self._current_id

    @staticmethod
    def _key(secret: str) -> tuple[str, bytes]:
        key = derive_key(secret, b"crank secrets v1")
        return hashlib.sha256(key).hexdigest()[:12], key

    def seal(self, plaintext: str, associated: bytes) -> Sealed:
        nonce = os.urandom(12)
        ciphertext = self._keys[self._current_id].encrypt(nonce, plaintext.encode(), associated)
        return Sealed(ciphertext, nonce, self._current_id)

    def open(self, sealed: Sealed, associated: bytes) -> str:
        aead = self._keys.get(sealed.key_id)
        if aead is None:
            raise CryptoError(f"no configured key has id {sealed.key_id}")
        try:
            return aead.decrypt(sealed.nonce, sealed.ciphertext, associated).decode()
        except InvalidTag:
            raise CryptoError("secret does not decrypt: wrong key or tampered value") from None


def secret_associated_data(workspace_id: int, name: str) -> bytes:
    """Binds a sealed secret to (workspace, name): moved to another row, it does not open."""
    return f"crank-secret:{workspace_id}:{name}".encode()


class KeyHasher:
    """Hashes API keys and admin tokens; only the hash is ever stored.

    During a rotation a key may still be stored under a previous secret's
    hash: look-ups match any of ``candidates`` and the caller re-hashes the
    row under the current secret when it was found under an old one.
    """

    def __init__(self, secret_key: str, previous: tuple[str, ...] = ()) -> None:
        self._key = derive_key(secret_key, b"crank key hashing v1")
        self._previous = [derive_key(old, b"crank key hashing v1") for old in previous]

    def hash(self, key: str) -> bytes:
        return hmac.new(self._key, key.encode(), hashlib.sha256).digest()

    def candidates(self, key: str) -> list[bytes]:
        """The key's hash under the current secret first, then under previous ones."""
        return [self.hash(key)] + [
            hmac.new(old, key.encode(), hashlib.sha256).digest() for old in self._previous
        ]
