"""DELETE confirmation tokens: signing and checking, without a database."""

from __future__ import annotations

import base64
import re
import time
from typing import Any

import pytest

from mcp_gateway.pipeline.confirmation_tokens import (
    MAX_TOKEN_LENGTH,
    REQUEST_STATES,
    ConfirmationSigner,
    InvalidToken,
)
from shared.engine.canonical import arguments_hash
from shared.engine.request_builder import CONFIRMATION_TOKEN_PATTERN

KEY = "test-secret-key-that-is-long-enough-0123456789"
DIGEST = arguments_hash({"order_id": "ord_123"})
CONTEXT: dict[str, Any] = {"agent_id": 7, "operation_id": 42, "version": 3, "digest": DIGEST}
NOW = 1_800_000_000.0


@pytest.fixture
def signer() -> ConfirmationSigner:
    return ConfirmationSigner(KEY, ttl_s=300)


def test_a_token_matches_the_declared_pattern_and_is_short(signer: ConfirmationSigner) -> None:
    token = signer.issue(**CONTEXT, now=NOW)
    assert re.fullmatch(CONFIRMATION_TOKEN_PATTERN, token)
    assert len(token) <= 64
    big: dict[str, Any] = {
        "agent_id": 2**40,
        "operation_id": 2**40,
        "version": 2**20,
        "digest": DIGEST,
    }
    assert len(signer.issue(**big)) <= MAX_TOKEN_LENGTH


def test_a_token_verifies_for_exactly_its_call_until_it_expires(
    signer: ConfirmationSigner,
) -> None:
    token = signer.issue(**CONTEXT, now=NOW)
    use = signer.verify(token, **CONTEXT, now=NOW + 299)
    assert use.expires_at.timestamp() == NOW + 300
    assert len(use.token_hash) == 32
    with pytest.raises(InvalidToken) as expired:
        signer.verify(token, **CONTEXT, now=NOW + 300)
    assert expired.value.reason == "expired"


def test_two_tokens_for_the_same_call_are_different_uses(signer: ConfirmationSigner) -> None:
    first, second = signer.issue(**CONTEXT, now=NOW), signer.issue(**CONTEXT, now=NOW)
    assert first != second
    uses = {signer.verify(t, **CONTEXT, now=NOW).token_hash for t in (first, second)}
    assert len(uses) == 2


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"agent_id": 8}, "other_agent"),
        ({"operation_id": 43}, "other_operation"),
        ({"version": 4}, "other_version"),
        ({"digest": arguments_hash({"order_id": "ord_124"})}, "other_arguments"),
    ],
)
def test_a_token_is_bound_to_agent_operation_version_and_arguments(
    signer: ConfirmationSigner, change: dict[str, Any], reason: str
) -> None:
    token = signer.issue(**CONTEXT, now=NOW)
    with pytest.raises(InvalidToken) as refused:
        signer.verify(token, **(CONTEXT | change), now=NOW)
    assert refused.value.reason == reason


def test_a_token_of_another_secret_key_is_refused(signer: ConfirmationSigner) -> None:
    token = ConfirmationSigner("another-secret-key-that-is-long-enough-000", 300).issue(
        **CONTEXT, now=NOW
    )
    with pytest.raises(InvalidToken) as refused:
        signer.verify(token, **CONTEXT, now=NOW)
    assert refused.value.reason == "other_arguments"  # the MAC does not match: forged


def test_a_changed_claim_breaks_the_signature(signer: ConfirmationSigner) -> None:
    """Moving the expiry (or anything else in the claims) needs the server's key."""
    token = signer.issue(**CONTEXT, now=NOW)
    raw = bytearray(base64.urlsafe_b64decode(token[3:] + "=" * (-len(token[3:]) % 4)))
    raw[8] ^= 0x01  # the last byte of the expiry: [agent, operation, version, expiry, nonce]
    forged = "ct_" + base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()
    with pytest.raises(InvalidToken) as refused:
        signer.verify(forged, **CONTEXT, now=NOW)
    assert refused.value.reason == "other_arguments"


@pytest.mark.parametrize(
    "token",
    ["ct_", "ct_A", "ct_AAAA", "ct_" + "A" * 40, "xx_" + "A" * 40, "ct_" + "A" * MAX_TOKEN_LENGTH],
)
def test_malformed_tokens_are_refused(signer: ConfirmationSigner, token: str) -> None:
    with pytest.raises(InvalidToken) as refused:
        signer.verify(token, **CONTEXT, now=NOW)
    assert refused.value.reason == "malformed"


def test_the_expiry_follows_the_configured_ttl() -> None:
    token = ConfirmationSigner(KEY, ttl_s=5).issue(**CONTEXT)
    use = ConfirmationSigner(KEY, ttl_s=5).verify(token, **CONTEXT)
    assert 4 <= use.expires_at.timestamp() - time.time() <= 5


# -- the requestState of a confirmation asked of the human (2026-07-28 elicitation) ---------


def test_a_request_state_binds_the_key_and_expires() -> None:
    states = ConfirmationSigner(KEY, ttl_s=120, kind=REQUEST_STATES)
    state = states.issue(**CONTEXT, requester_id=11, now=NOW)
    assert state.startswith("rs_")
    assert states.verify(
        state, **CONTEXT, requester_id=11, now=NOW + 119
    ).expires_at.timestamp() == (NOW + 120)
    for key_id in (12, None):
        with pytest.raises(InvalidToken) as other:
            states.verify(state, **CONTEXT, requester_id=key_id, now=NOW)
        assert other.value.reason == "other_key"
    with pytest.raises(InvalidToken) as expired:
        states.verify(state, **CONTEXT, requester_id=11, now=NOW + 120)
    assert expired.value.reason == "expired"


def test_a_token_and_a_request_state_never_pass_for_each_other(
    signer: ConfirmationSigner,
) -> None:
    """Separate HKDF labels, MAC contexts and prefixes: neither kind verifies as the other,
    even with the prefix swapped."""
    states = ConfirmationSigner(KEY, ttl_s=300, kind=REQUEST_STATES)
    token = signer.issue(**CONTEXT, now=NOW)
    state = states.issue(**CONTEXT, requester_id=11, now=NOW)
    with pytest.raises(InvalidToken):
        states.verify("rs_" + token[3:], **CONTEXT, now=NOW)
    with pytest.raises(InvalidToken):
        signer.verify("ct_" + state[3:], **CONTEXT, requester_id=11, now=NOW)
    with pytest.raises(InvalidToken):
        states.verify(token, **CONTEXT, now=NOW)


def test_a_token_keeps_its_seed_shape_without_a_key(signer: ConfirmationSigner) -> None:
    """The key id is a trailing default: a ct_ token's claims are the five seed fields."""
    raw = base64.urlsafe_b64decode(signer.issue(**CONTEXT, now=NOW)[3:] + "==")
    assert raw[0] == 0x95  # a msgpack array of five
