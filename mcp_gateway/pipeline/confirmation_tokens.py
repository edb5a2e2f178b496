"""DELETE confirmations: signed, single-use, checkable by every replica.

``ConfirmationSigner`` issues and verifies both kinds, ``ct_`` tokens for the model and
``rs_`` request states for the 2026-07-28 form; whether one was used before is the
gate's database answer (docs/architecture.md, "DELETE confirmation").
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

import msgspec

from shared.crypto import b64url_decode, b64url_encode, derive_key

PREFIX = "ct_"
MAX_TOKEN_LENGTH = 160  # a real token is about 55 characters
_MAC_BYTES = 16
_NONCE_BYTES = 8


@dataclass(frozen=True, slots=True)
class SignedKind:
    """What keeps one kind of signed confirmation apart from the other."""

    prefix: str
    label: bytes  # the HKDF info
    context: bytes  # the first bytes under the MAC


TOKENS = SignedKind(PREFIX, b"crank confirmation tokens v1", b"ct1")
REQUEST_STATES = SignedKind("rs_", b"crank elicitation request states v1", b"rs1")

Reason = Literal[
    "malformed",
    "other_agent",
    "other_operation",
    "other_version",
    "other_key",  # a request state asked by another requester (key or person)
    "other_arguments",  # or a forged token: the MAC does not match these arguments
    "expired",
    "used",
]


class InvalidToken(ValueError):
    """A token refused for this call; ``reason`` goes to the logs and details, not to the model."""

    def __init__(self, reason: Reason) -> None:
        super().__init__(reason)
        self.reason: Reason = reason


class _Claims(msgspec.Struct, array_like=True, frozen=True):
    agent_id: int
    operation_id: int
    version: int
    expires_at: int  # unix seconds
    nonce: bytes
    # request states only (the requester's id); absent from a ct_ token's array
    requester_id: int | None = None


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Claims)


@dataclass(frozen=True, slots=True)
class TokenUse:
    """A verified token: what marks it used, and until when that mark matters."""

    token_hash: bytes
    expires_at: datetime


class ConfirmationSigner:
    """One per process and kind (GatewayState.confirmations, GatewayState.request_states)."""

    def __init__(self, secret_key: str, ttl_s: int, kind: SignedKind = TOKENS) -> None:
        self._key = derive_key(secret_key, kind.label)
        self._kind = kind
        self.ttl_s = ttl_s

    def _mac(self, claims: bytes, digest: bytes) -> bytes:
        signed = self._kind.context + claims + digest
        return hmac.new(self._key, signed, hashlib.sha256).digest()[:_MAC_BYTES]

    def issue(
        self,
        *,
        agent_id: int,
        operation_id: int,
        version: int,
        digest: bytes,
        requester_id: int | None = None,
        now: float | None = None,
    ) -> str:
        """A token for this agent, operation version and arguments hash (and requester, if given)."""
        issued_at = time.time() if now is None else now
        fields = (agent_id, operation_id, version, int(issued_at) + self.ttl_s)
        keyed = (
            () if requester_id is None else (requester_id,)
        )  # a ct_ token keeps the five seed fields
        claims = _encoder.encode((*fields, os.urandom(_NONCE_BYTES), *keyed))
        return self._kind.prefix + b64url_encode(claims + self._mac(claims, digest))

    def verify(
        self,
        token: str,
        *,
        agent_id: int,
        operation_id: int,
        version: int,
        digest: bytes,
        requester_id: int | None = None,
        now: float | None = None,
    ) -> TokenUse:
        """The use of a token issued for exactly this call; ``InvalidToken`` otherwise.

        Whether it was used before is the database's answer (``check``)."""
        prefix = self._kind.prefix
        if not token.startswith(prefix) or len(token) > MAX_TOKEN_LENGTH:
            raise InvalidToken("malformed")
        try:
            raw = b64url_decode(token[len(prefix) :])
            claims = _decoder.decode(raw[:-_MAC_BYTES]) if len(raw) > _MAC_BYTES else None
        except (binascii.Error, ValueError, msgspec.DecodeError):
            claims = None
        if claims is None:
            raise InvalidToken("malformed")
        if claims.agent_id != agent_id:
            raise InvalidToken("other_agent")
        if claims.operation_id != operation_id:
            raise InvalidToken("other_operation")
        if claims.version != version:
            raise InvalidToken("other_version")
        if claims.requester_id != requester_id:
            raise InvalidToken("other_key")
        if not hmac.compare_digest(raw[-_MAC_BYTES:], self._mac(raw[:-_MAC_BYTES], digest)):
            raise InvalidToken("other_arguments")
        if (time.time() if now is None else now) >= claims.expires_at:
            raise InvalidToken("expired")
        return TokenUse(
            token_hash=hashlib.sha256(raw).digest(),
            expires_at=datetime.fromtimestamp(claims.expires_at, UTC),
        )
