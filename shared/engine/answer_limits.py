"""What one upstream answer may cost a shared process (docs/architecture.md, "Upstream answers").

Three bounds, cheapest first:

- the raw body: an operation's ``response.max_raw_bytes``, or by default
  ``RAW_PER_RESULT`` times its ``response.max_bytes`` (at least
  ``RAW_FLOOR``); the executor's ceiling (``CRANK_UPSTREAM_MAX_RESPONSE_BYTES``)
  caps either. The executor stops reading past it.
- the decoded size: a JSON answer decodes to Python objects of about 70 bytes
  per value, so ``[{},{},...]`` grows some 25 times. ``json_node_bound`` counts
  the bytes that open a value or a key (``,`` ``:`` ``[`` ``{``) in C before
  anything is decoded; over ``CRANK_UPSTREAM_MAX_JSON_NODES`` the answer is
  refused. Punctuation inside strings counts too, so the bound errs towards
  refusing, never towards decoding more.
- the event loop: an answer over ``OFF_LOOP_BYTES`` is decoded, selected and
  masked in a worker thread, so other requests keep being served.
"""

from __future__ import annotations

import re
from typing import Final

from shared.engine.spec import ResponseSpec

RAW_FLOOR: Final = 1024 * 1024
RAW_PER_RESULT: Final = 16  # raw bytes allowed per byte of selected result
MAX_RAW_BYTES: Final = 100 * 1024 * 1024  # the most response.max_raw_bytes may say
DEFAULT_MAX_JSON_NODES: Final = 250_000
OFF_LOOP_BYTES: Final = 64 * 1024
_STRUCTURE: Final = (b",", b":", b"[", b"{")
_LEADING_SPACE: Final = re.compile(rb"[ \t\r\n]*")  # JSON's whitespace


def raw_body_limit(response: ResponseSpec) -> int:
    """The operation's raw body limit, before the executor's ceiling."""
    if response.max_raw_bytes is not None:
        return response.max_raw_bytes
    return max(RAW_FLOOR, RAW_PER_RESULT * response.max_bytes)


def json_node_bound(body: bytes) -> int:
    """An upper bound on the values and keys ``body`` decodes to, if it is JSON."""
    match = _LEADING_SPACE.match(body)
    start = 0 if match is None else match.end()
    if body[start : start + 1] not in (b"[", b"{"):
        return 1  # a scalar (or no JSON at all): one value
    return 1 + sum(body.count(mark) for mark in _STRUCTURE)


__all__ = [
    "DEFAULT_MAX_JSON_NODES",
    "MAX_RAW_BYTES",
    "OFF_LOOP_BYTES",
    "RAW_FLOOR",
    "RAW_PER_RESULT",
    "json_node_bound",
    "raw_body_limit",
]
