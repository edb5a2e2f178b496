"""DELETE confirmation tokens: signed, single-use, checkable by every replica.

Issuing needs no database. A token is ``ct_`` + base64url(claims ‖ mac):

    claims  msgpack [agent_id, operation_id, version, expires_at, nonce]
            (expires_at in unix seconds, nonce 8 random bytes)
    mac     HMAC-SHA-256(key, "ct1" ‖ claims ‖ arguments_hash)[:16]
    key     HKDF-SHA-256(CRANK_SECRET_KEY, info "crank confirmation tokens v1")

The arguments hash (SHA-256 of the RFC 8785 canonical arguments, without the
token) is bound through the MAC rather than carried, which keeps a token about
55 characters long for the model to copy. Whether a token was used before is
the database's answer (the gate, mcp_gateway.pipeline.confirmation). Tokens are signed
with the current ``CRANK_SECRET_KEY`` only; after a rotation, tokens issued
before it are refused.
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
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from shared.crypto import b64url_decode, b64url_encode

PREFIX = "ct_"
MAX_TOKEN_LENGTH = 160  # a real token is about 55 characters
_MAC_BYTES = 16
_NONCE_BYTES = 8
_CONTEXT = b"ct1"

Reason = Literal[
    "malformed",
    "other_agent",
    "other_operation",
    "other_version",
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


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(_Claims)


@dataclass(frozen=True, slots=True)
class TokenUse:
    """A verified token: what marks it used, and until when that mark matters."""

    token_hash: bytes
    expires_at: datetime


class ConfirmationSigner:
    """One per process (GatewayState.confirmations)."""

    def __init__(self, secret_key: str, ttl_s: int) -> None:
        self._key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"crank confirmation tokens v1"
        ).derive(secret_key.encode())
        self.ttl_s = ttl_s

    def _mac(self, claims: bytes, digest: bytes) -> bytes:
        return hmac.new(self._key, _CONTEXT + claims + digest, hashlib.sha256).digest()[:_MAC_BYTES]

    def issue(
        self,
        *,
        agent_id: int,
        operation_id: int,
        version: int,
        digest: bytes,
        now: float | None = None,
    ) -> str:
        """A token for this agent, operation version and arguments hash."""
        issued_at = time.time() if now is None else now
        claims = _encoder.encode(
            _Claims(
                agent_id,
                operation_id,
                version,
                int(issued_at) + self.ttl_s,
                os.urandom(_NONCE_BYTES),
            )
        )
        return PREFIX + b64url_encode(claims + self._mac(claims, digest))

    def verify(
        self,
        token: str,
        *,
        agent_id: int,
        operation_id: int,
        version: int,
        digest: bytes,
        now: float | None = None,
    ) -> TokenUse:
        """The use of a token issued for exactly this call; ``InvalidToken`` otherwise.

        Whether it was used before is the database's answer (``check``)."""
        if not token.startswith(PREFIX) or len(token) > MAX_TOKEN_LENGTH:
            raise InvalidToken("malformed")
        try:
            raw = b64url_decode(token[len(PREFIX) :])
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
        if not hmac.compare_digest(raw[-_MAC_BYTES:], self._mac(raw[:-_MAC_BYTES], digest)):
            raise InvalidToken("other_arguments")
        if (time.time() if now is None else now) >= claims.expires_at:
            raise InvalidToken("expired")
        return TokenUse(
            token_hash=hashlib.sha256(raw).digest(),
            expires_at=datetime.fromtimestamp(claims.expires_at, UTC),
        )
