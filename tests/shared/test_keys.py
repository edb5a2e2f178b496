from __future__ import annotations

import re

import pytest

from shared.keys import KeyKind, display_prefix, generate_key, parse_key


@pytest.mark.parametrize("kind", list(KeyKind))
def test_generated_key_has_visible_kind_and_valid_checksum(kind: KeyKind) -> None:
    key = generate_key(kind)
    assert re.fullmatch(rf"crk_{kind.value}_[0-9A-Za-z]{{49}}", key)
    assert parse_key(key) is kind


def test_mistyped_key_fails_its_checksum() -> None:
    key = generate_key(KeyKind.AGENT)
    swapped = key[:-8] + key[-7] + key[-8] + key[-6:]
    assert swapped == key or parse_key(swapped) is None
    assert parse_key(key[:-1] + ("A" if key[-1] != "A" else "B")) is None


def test_keys_of_wrong_shape_are_not_keys() -> None:
    assert parse_key("") is None
    assert parse_key("crk_agent_short") is None
    assert parse_key("Bearer crk_agent_x") is None
    assert parse_key("crk_admin_" + "!" * 49) is None


def test_display_prefix_reveals_kind_and_eight_characters_only() -> None:
    key = generate_key(KeyKind.APPROVAL)
    assert display_prefix(key) == key[: len("crk_approval_") + 8]


def test_keys_are_unique() -> None:
    assert len({generate_key(KeyKind.AGENT) for _ in range(1000)}) == 1000
