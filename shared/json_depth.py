"""How deeply a JSON text nests, measured on the bytes before any parser recurses.

msgspec's decoder gives up with RecursionError near Python's recursion limit,
and every later step that walks a value (schemas, canonical hashes, encoding)
recurses too; a bound checked on the text keeps a deep value out of all of
them. The check is C-speed work (a regex, ``bytes.translate``,
``itertools.accumulate``), and a text with fewer brackets than the bound
costs two ``bytes.count``.
"""

from __future__ import annotations

import re
from itertools import accumulate

_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)  # brackets in strings do not nest
_NOT_BRACKETS = bytes(sorted(set(range(256)) - set(b"[]{}")))
_STEP = tuple(1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256))


def nests_deeper_than(text: bytes, limit: int) -> bool:
    """Whether arrays and objects in ``text`` nest more than ``limit`` levels deep.

    For malformed JSON the answer is about its brackets; the parser refuses it anyway."""
    if text.count(b"[") + text.count(b"{") <= limit:
        return False
    brackets = _STRING.sub(b"", text).translate(None, _NOT_BRACKETS)
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0) > limit
