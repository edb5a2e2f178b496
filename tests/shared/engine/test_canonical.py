"""Canonical JSON and the number normal form (docs/architecture.md, "Argument numbers"):
RFC 8785 where doubles hold the value, exact integers beyond, and a normal form
that survives PostgreSQL's jsonb byte for byte."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
import rfc8785
from psycopg.types.json import Jsonb

from shared.db import connect
from shared.engine.canonical import arguments_hash, canonical_json, normal_numbers

# What the transport's decoder hands the gateway: floats as JSON clients write them.
NUMBERS = [
    0,
    -0.0,
    1.0,
    2.5,
    -7,
    0.1,
    1.5e-7,
    5e-324,
    1e16,
    1e20,
    -1e21,
    2.0**60,
    1.7976931348623157e308,
    2**53 - 1,
    2**53 + 1,
    -(2**70) - 3,
    10**200 + 1,
]


@pytest.mark.parametrize(
    "value",
    [
        {"b": [1, 2.5, "x"], "a": None, "é": True, "\U0001f600": False, "\ufb01": {"z": 1}},
        {"n": 2**53 - 1, "m": -(2**53) + 1, "f": 0.1, "e": 1e-7, "w": 1e15, "s": "\n\x01\u2028"},
        ["\u20ac", "\x7f", 123.456, [[]], {}],
    ],
)
def test_within_the_range_of_doubles_it_is_rfc_8785(value: Any) -> None:
    assert canonical_json(value) == rfc8785.dumps(value)


def test_integers_beyond_doubles_are_written_exactly() -> None:
    assert canonical_json({"n": 2**53 + 1}) == b'{"n":9007199254740993}'
    assert canonical_json([-(10**30)]) == b"[-1000000000000000000000000000000]"
    assert arguments_hash({"n": 2**53 + 1}) != arguments_hash({"n": 2**53})
    with pytest.raises(rfc8785.IntegerDomainError):  # what the RFC's library refuses
        rfc8785.dumps(2**53 + 1)


def test_a_number_hashes_the_same_in_any_spelling() -> None:
    same: list[dict[str, Any]] = [{"a": 1e20}, {"a": 10**20}, {"a": 100000000000000000000.0}]
    assert len({arguments_hash(v) for v in same}) == 1
    assert arguments_hash({"a": 1.0, "b": [2.0]}) == arguments_hash({"b": [2], "a": 1})
    assert arguments_hash({"a": -0.0}) == arguments_hash({"a": 0})


def test_whole_floats_become_the_integers_of_their_shortest_spelling() -> None:
    normal = normal_numbers({"a": 1e20, "b": [1.0, 2.5, -0.0, {"c": 2.0**60}], "d": True, "e": "1"})
    assert normal == {
        "a": 10**20,
        "b": [1, 2.5, 0, {"c": 1152921504606847000}],
        "d": True,
        "e": "1",
    }
    assert [type(v) for v in normal["b"][:3]] == [int, float, int]
    assert normal["d"] is True


async def test_the_normal_form_survives_jsonb_byte_for_byte(database_url: str) -> None:
    """What the approval gate stores and the worker reads back encodes (as the request
    builder encodes bodies) to the same bytes as the arguments taken in."""
    encode = msgspec.json.encode
    taken_in = normal_numbers({"n": NUMBERS, "nested": {"x": 1e20, "y": [0.5, 3.0]}})
    raw = {"x": 1e20}  # not normalised
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT %s::jsonb AS stored, %s::jsonb AS raw", (Jsonb(taken_in), Jsonb(raw))
        )
        row = await cur.fetchone()
    assert row is not None
    assert encode(row["stored"]) == encode(taken_in)
    assert canonical_json(row["stored"]) == canonical_json(taken_in)
    # Without the normal form a whole float comes back as an integer: other bytes upstream.
    assert (encode(raw), encode(row["raw"])) == (b'{"x":1e20}', b'{"x":100000000000000000000}')
