from __future__ import annotations

import pytest

from shared.crypto import CryptoError, KeyHasher, SecretBox, secret_associated_data

KEY = "k" * 40
OTHER = "o" * 40


def test_sealed_secret_opens_with_same_key_and_place() -> None:
    box = SecretBox(KEY)
    place = secret_associated_data(1, "stripe")
    sealed = box.seal("sk_live_123", place)
    assert b"sk_live_123" not in sealed.ciphertext
    assert box.open(sealed, place) == "sk_live_123"


def test_sealed_secret_cannot_be_moved_to_another_name() -> None:
    box = SecretBox(KEY)
    sealed = box.seal("v", secret_associated_data(1, "a"))
    with pytest.raises(CryptoError):
        box.open(sealed, secret_associated_data(1, "b"))


def test_rotation_keeps_previous_key_readable_and_seals_with_new_one() -> None:
    old_box = SecretBox(OTHER)
    sealed = old_box.seal("v", b"ad")
    rotated = SecretBox(KEY, previous=(OTHER,))
    assert rotated.open(sealed, b"ad") == "v"
    assert rotated.seal("v", b"ad").key_id != sealed.key_id
    with pytest.raises(CryptoError):
        SecretBox(KEY).open(sealed, b"ad")


def test_short_secret_key_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 32"):
        SecretBox("short")


def test_key_hash_depends_on_server_secret() -> None:
    assert KeyHasher(KEY).hash("crk_x") != KeyHasher(OTHER).hash("crk_x")
    assert KeyHasher(KEY).hash("crk_x") == KeyHasher(KEY).hash("crk_x")
    assert KeyHasher(KEY).hash("crk_y") != KeyHasher(KEY).hash("crk_x")


def test_key_hash_candidates_cover_previous_secrets_current_first() -> None:
    rotated = KeyHasher(KEY, previous=(OTHER,))
    assert rotated.candidates("crk_x") == [
        KeyHasher(KEY).hash("crk_x"),
        KeyHasher(OTHER).hash("crk_x"),
    ]
