"""Signed MCP session ids that every replica can check without a database.

An id is ``crs1.<claims>.<signature>``: the claims (key, agent, negotiated
protocol version, issue time, a random nonce, whether the client declared form
elicitation) are msgpack in base64url, the
signature an HMAC-SHA-256 (truncated to 128 bits) with a key derived from
``CRANK_SECRET_KEY``. A session ends when it expires
(``CRANK_MCP_SESSION_TTL_S``) or when a DELETE on any replica puts its hash on
the termination list, which every replica learns by NOTIFY at once or by
polling within one refresh interval.

``verify`` remembers the claims of ids whose signature it has checked
(bounded), so a session's later requests skip the HMAC and the decoding; the
expiry is still compared with the clock on every call, and the termination
list is the caller's to check on every request.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import os
import time

import msgspec
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from shared.crypto import b64url_decode, b64url_encode

PREFIX = "crs1"
MAX_LENGTH = 256
_MAX_VERIFIED = 10_000


class MalformedSessionId(ValueError):
    """Not a session id at all (HTTP 400), as opposed to an unknown one (404)."""


class SessionClaims(msgspec.Struct, array_like=True, frozen=True):
    """What a session id carries under its signature; ``issued_at`` in unix seconds."""

    requester_id: int  # mcp_gateway.vocabulary.requesters: a key's id or a person's
    agent_id: int
    protocol_version: str
    issued_at: int
    nonce: bytes
    # The initialize declared form elicitation (2025-06-18 on): a DELETE confirmation
    # may then ask the human on the call's SSE stream. Absent in older ids: False.
    elicitation: bool = False


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(SessionClaims)


def session_hash(session_id: str) -> bytes:
    """What the termination list stores: never the id itself."""
    return hashlib.sha256(session_id.encode()).digest()


class SessionSigner:
    """Issues and checks session ids; they live ``ttl_s`` seconds from issue."""

    def __init__(self, secret_key: str, ttl_s: int) -> None:
        self._key = HKDF(
            algorithm=hashes.SHA256(), length=32, salt=None, info=b"crank mcp sessions v1"
        ).derive(secret_key.encode())
        self.ttl_s = ttl_s
        self._verified: dict[str, SessionClaims] = {}  # ids with a good signature

    def _sign(self, payload: str) -> str:
        return b64url_encode(hmac.new(self._key, payload.encode(), hashlib.sha256).digest()[:16])

    def issue(
        self, requester_id: int, agent_id: int, protocol_version: str, *, elicitation: bool = False
    ) -> str:
        claims = SessionClaims(
            requester_id, agent_id, protocol_version, int(time.time()), os.urandom(12), elicitation
        )
        payload = b64url_encode(_encoder.encode(claims))
        return f"{PREFIX}.{payload}.{self._sign(payload)}"

    def verify(self, session_id: str, now: float | None = None) -> SessionClaims | None:
        """The claims of a valid, unexpired id; None for a forged or expired one.

        Raises MalformedSessionId when the value cannot be a session id.
        """
        claims = self._verified.get(session_id)
        if claims is None:
            claims = self._check(session_id)
            if claims is None:
                return None
            if len(self._verified) >= _MAX_VERIFIED:
                self._verified.clear()
            self._verified[session_id] = claims
        current = time.time() if now is None else now
        if current >= claims.issued_at + self.ttl_s:
            return None
        return claims

    def _check(self, session_id: str) -> SessionClaims | None:
        """The claims of a well-formed id with a good signature, expired or not."""
        if (
            not session_id
            or len(session_id) > MAX_LENGTH
            or not all(0x21 <= ord(c) <= 0x7E for c in session_id)
        ):
            raise MalformedSessionId("MCP-Session-Id must be 1-256 visible ASCII characters")
        parts = session_id.split(".")
        if len(parts) != 3 or parts[0] != PREFIX:
            return None  # well-formed ASCII but not ours: unknown session
        payload, signature = parts[1], parts[2]
        if not hmac.compare_digest(self._sign(payload), signature):
            return None
        try:
            return _decoder.decode(b64url_decode(payload))
        except (msgspec.DecodeError, binascii.Error, ValueError):
            return None

    def expires_at(self, claims: SessionClaims) -> float:
        return float(claims.issued_at + self.ttl_s)
