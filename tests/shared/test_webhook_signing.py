"""Crank's Standard Webhooks signatures verify with an independent implementation
(PyPI ``standardwebhooks``), and only for the exact id, timestamp and body."""

from __future__ import annotations

import base64
import time

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from shared.webhook_signing import new_signing_secret, sign, signed_headers


def test_a_signed_delivery_verifies_with_standardwebhooks() -> None:
    secret = new_signing_secret()
    body = b'{"type":"approval.created","data":{"tool":"refund"}}'
    headers = signed_headers(secret, "msg_1", int(time.time()), body)
    assert Webhook(secret).verify(body, headers) == {
        "type": "approval.created",
        "data": {"tool": "refund"},
    }


@pytest.mark.parametrize("change", ["body", "id", "timestamp", "secret"])
def test_any_change_breaks_the_signature(change: str) -> None:
    secret = new_signing_secret()
    now = int(time.time())
    body = b'{"a":1}'
    headers = signed_headers(secret, "msg_1", now, body)
    if change == "body":
        body = b'{"a":2}'
    elif change == "id":
        headers["webhook-id"] = "msg_2"
    elif change == "timestamp":
        headers["webhook-timestamp"] = str(now - 1)
    else:
        secret = new_signing_secret()
    with pytest.raises(WebhookVerificationError):
        Webhook(secret).verify(body, headers)


def test_secrets_are_whsec_and_32_random_bytes_and_signatures_v1() -> None:
    first, second = new_signing_secret(), new_signing_secret()
    assert first != second
    assert first.startswith("whsec_")
    assert len(base64.b64decode(first.removeprefix("whsec_"))) == 32
    assert sign(first, "msg_1", 1, b"{}").startswith("v1,")
