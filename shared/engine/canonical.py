"""Canonical JSON (RFC 8785) and the hash of a call's arguments.

Two calls are "the same arguments" when their canonical JSON is byte-equal:
key order, whitespace and number spelling (1.0 vs 1) do not matter. Used by
approvals (one active row per arguments) and idempotency records.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

import rfc8785


def canonical_json(value: Any) -> bytes:
    return rfc8785.dumps(value)


def arguments_hash(arguments: Mapping[str, Any]) -> bytes:
    """SHA-256 of the canonical JSON: equal for the same arguments in any key order."""
    return hashlib.sha256(canonical_json(dict(arguments))).digest()
