"""Webhook signing secrets and signatures, as the Standard Webhooks specification
says (docs/architecture.md, "Webhooks").

A secret is ``whsec_`` + base64 of 32 random bytes; the control plane makes
one per subscription, shows it once and stores it sealed (``SecretBox``, bound
to the subscription's id); the gateway opens it to sign. A signature is
``v1,`` + base64 of HMAC-SHA256 over ``{webhook-id}.{webhook-timestamp}.{body}``
keyed with the secret's decoded bytes, sent in ``webhook-signature`` beside
``webhook-id`` and ``webhook-timestamp`` (Unix seconds of the attempt).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

SECRET_PREFIX = "whsec_"  # noqa: S105 - the format's prefix, not a secret
_SECRET_BYTES = 32


def new_signing_secret() -> str:
    return SECRET_PREFIX + base64.b64encode(secrets.token_bytes(_SECRET_BYTES)).decode()


def subscription_associated_data(subscription_id: str) -> bytes:
    """Binds a sealed signing secret to its subscription: moved to another row, it
    does not open."""
    return f"crank-webhook-secret:{subscription_id}".encode()


def sign(secret: str, webhook_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` header value for one attempt."""
    key = base64.b64decode(secret.removeprefix(SECRET_PREFIX))
    signed = f"{webhook_id}.{timestamp}.".encode() + body
    digest = hmac.new(key, signed, hashlib.sha256).digest()
    return "v1," + base64.b64encode(digest).decode()


def signed_headers(secret: str, webhook_id: str, timestamp: int, body: bytes) -> dict[str, str]:
    """The three Standard Webhooks headers of one attempt."""
    return {
        "webhook-id": webhook_id,
        "webhook-timestamp": str(timestamp),
        "webhook-signature": sign(secret, webhook_id, timestamp, body),
    }


__all__ = [
    "SECRET_PREFIX",
    "new_signing_secret",
    "sign",
    "signed_headers",
    "subscription_associated_data",
]
