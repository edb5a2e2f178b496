"""Canonical JSON, the hash of a call's arguments, and the number normal form.

Two calls are "the same arguments" when their canonical JSON is byte-equal:
key order, whitespace and number spelling (1.0 vs 1, 1e20 vs
100000000000000000000) do not matter. Used by approvals (one active row per
arguments), DELETE confirmation tokens and idempotency records.

Canonical JSON is RFC 8785 (keys sorted by UTF-16 code units, its string
escaping and number formatting, both from ``rfc8785``) with one deliberate
difference: an integer is written exactly, also beyond 2**53, where RFC 8785
would have to round it to a double (docs/architecture.md, "Argument numbers").
The hash is internal, so exactness matters more than the letter of the RFC.

``normal_numbers`` is applied once, when arguments are validated: a whole
float becomes the integer of its shortest decimal spelling, which is what
PostgreSQL's jsonb gives back for it, so a call rebuilt from stored arguments
sends the same bytes upstream as the direct call did.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from decimal import Decimal
from typing import Any

import rfc8785


def normal_number(value: float) -> int | float:
    """A whole float as the integer of its shortest decimal spelling (1e20 → 10**20,
    -0.0 → 0); any other float unchanged."""
    if value.is_integer():  # False for NaN and infinities, which JSON cannot carry
        return int(Decimal(repr(value)))
    return value


_WALKED = frozenset((float, dict, list))  # what decoded JSON holds that may change


def normal_numbers(value: Any) -> Any:
    """``value`` with every whole float replaced by its integer (see ``normal_number``).
    Strings, integers, booleans and null are passed over without a call: a 1 MiB
    list of them takes milliseconds."""
    kind = type(value)
    if kind is float:
        return normal_number(value)
    if kind is dict:
        return {k: normal_numbers(v) if type(v) in _WALKED else v for k, v in value.items()}
    if kind is list:
        return [normal_numbers(v) if type(v) in _WALKED else v for v in value]
    return value


def _utf16(key: str) -> bytes:
    return key.encode("utf-16be")


def _write(value: Any, out: bytearray) -> None:
    if isinstance(value, float):
        value = normal_number(value)
    if isinstance(value, dict):
        out += b"{"
        for n, key in enumerate(sorted(value, key=_utf16)):
            if n:
                out += b","
            out += rfc8785.dumps(key)
            out += b":"
            _write(value[key], out)
        out += b"}"
    elif isinstance(value, list | tuple):
        out += b"["
        for n, item in enumerate(value):
            if n:
                out += b","
            _write(item, out)
        out += b"]"
    elif isinstance(value, int) and not isinstance(value, bool):
        out += str(value).encode()  # exact at any size (RFC 8785 stops at 2**53)
    else:
        out += rfc8785.dumps(value)  # strings, non-whole floats, booleans, null


def canonical_json(value: Any) -> bytes:
    out = bytearray()
    _write(value, out)
    return bytes(out)


def arguments_hash(arguments: Mapping[str, Any]) -> bytes:
    """SHA-256 of the canonical JSON: equal for the same arguments in any key order."""
    return hashlib.sha256(canonical_json(dict(arguments))).digest()
