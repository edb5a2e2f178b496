"""Masking secret values: the one rule for everything Crank shows, stores or logs.

``Masker(values)`` builds, once per set of secret values, one pattern that
matches every spelling in which an upstream may echo a value back:

    value            raw, or base64 of it (standard and URL-safe alphabets,
                     with and without padding)
    each character   itself, or escaped inside a JSON string (``\\"``, ``\\/``,
                     ``\\uXXXX`` in either case, a surrogate pair beyond the
                     BMP), or percent-encoded (its UTF-8 bytes as ``%XX`` in
                     either case; a space also as ``+``, as ``quote_plus`` writes it)

Characters may mix spellings (``tok\\u002Fen%2Babc``), which covers the
escaping of msgspec and every other JSON encoder, ``quote`` with any safe set
and ``quote_plus``. ASCII letters and digits match as themselves or as a JSON
``\\u00XX`` escape: no encoder escapes them, but an upstream may write every
character of a string that way (``"\\u0074\\u006F..."``) and a JSON reader
turns it back into the secret. Nothing is left out for being short: a one-character
secret masks every occurrence of that character, which garbles the text
rather than leak it. Not covered: a value escaped twice (JSON inside JSON)
and base64 of a text in which the value is only a part (except
``user:password`` for basic auth, which the request builder adds as a value
of its own).

Masking comes before any cut (``head``, ``excerpt``), so a secret straddling
a cut cannot leave its first characters behind. ``NO_SECRETS`` masks nothing
and costs nothing: the hot path of a call without secrets never reaches a
pattern.
"""

from __future__ import annotations

import base64
import functools
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import msgspec

MASK: Final = "****"
_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n"}
_JSON_SHORT |= {"\r": "\\r", "\t": "\\t"}
_ALNUM_RUN = re.compile("[A-Za-z0-9]+")
_encoder = msgspec.json.Encoder()


def _hex(text: str) -> str:
    """A pattern for hex digits in either case."""
    return "".join(f"[{c.lower()}{c.upper()}]" if c.isalpha() else c for c in text)


def _character(char: str) -> tuple[str, int]:
    """The pattern for every spelling of one character, and the longest spelling's length."""
    code = ord(char)
    if char.isascii() and char.isalnum():  # never percent-encoded, but may be JSON-escaped
        return f"(?:\\\\u{_hex(f'{code:04x}')}|{char})", 6
    if code < 0x10000:
        units = [code]
    else:  # beyond the BMP JSON writes a surrogate pair
        code -= 0x10000
        units = [0xD800 + (code >> 10), 0xDC00 + (code & 0x3FF)]
    spellings = {
        "".join(f"\\\\u{_hex(f'{unit:04x}')}" for unit in units): 6 * len(units),
        "".join(f"%{_hex(f'{byte:02x}')}" for byte in char.encode()): 3 * len(char.encode()),
        re.escape(char): 1,
    }
    if char in _JSON_SHORT:
        spellings[re.escape(_JSON_SHORT[char])] = 2
    if char == " ":
        spellings["\\+"] = 1
    # Longer spellings first: a raw backslash must not cut "\\u002F" short.
    ordered = sorted(spellings.items(), key=lambda item: -item[1])
    return "(?:" + "|".join(pattern for pattern, _ in ordered) + ")", ordered[0][1]


def _forms(value: str) -> set[str]:
    """The value and its base64 encodings (the spellings of their characters come later)."""
    raw = value.encode()
    forms = {value}
    for encoded in (base64.b64encode(raw).decode(), base64.urlsafe_b64encode(raw).decode()):
        forms |= {encoded, encoded.rstrip("=")}
    return forms


class Masker:
    """Replaces every spelling of the given secret values with ``MASK``.

    Build it once per set of values (``masker_for`` keeps the recent ones);
    ``bool(masker)`` is False when there is nothing to mask."""

    __slots__ = ("_anchors", "_longest", "_pattern")

    def __init__(self, values: Iterable[str]) -> None:
        forms = {form for value in values if value for form in _forms(value)}
        # Letters and digits are written as themselves unless JSON-escaped, so every
        # spelling of a form contains its longest run of them or a "\\u": a quick
        # test before the pattern.
        runs = [max(_ALNUM_RUN.findall(form), key=len, default="") for form in forms]
        self._anchors = tuple(sorted(set(runs))) if all(runs) else None
        alternatives: list[tuple[int, str, int]] = []
        for form in forms:
            parts = [_character(char) for char in form]
            pattern = "".join(part for part, _ in parts)
            alternatives.append((len(form), pattern, sum(longest for _, longest in parts)))
        # The longest form first: a padded base64 form must not match as its unpadded prefix.
        alternatives.sort(key=lambda item: (-item[0], item[1]))
        self._pattern = (
            re.compile("|".join(pattern for _, pattern, _ in alternatives))
            if alternatives
            else None
        )
        # The most characters one match can span: how far from a cut a secret can start.
        self._longest = max((longest for *_, longest in alternatives), default=0)

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __repr__(self) -> str:
        return "Masker(...)"  # never the values

    def _may_hold(self, text: str) -> bool:
        anchors = self._anchors
        return anchors is None or "\\u" in text or any(anchor in text for anchor in anchors)

    def text(self, text: str) -> str:
        if self._pattern is None or not self._may_hold(text):
            return text
        return self._pattern.sub(MASK, text)

    def value(self, value: Any) -> Any:
        """A JSON-like value with every string masked, keys included; ``value`` itself
        when nothing in it needs masking."""
        if self._pattern is None:
            return value
        # One scan of the encoded value (a string's JSON spelling still matches)
        # spares the walk over every string in the common case; a string holding
        # "\\u" escapes is encoded with its backslashes doubled, so it is walked.
        encoded = _encoder.encode(value).decode("utf-8", errors="replace")
        if not self._may_hold(encoded) or (
            self._pattern.search(encoded) is None and "\\\\u" not in encoded
        ):
            return value
        return self._walk(value)

    def _walk(self, value: Any) -> Any:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self._walk(item) for item in value]
        if isinstance(value, dict):
            return {self._walk(key): self._walk(item) for key, item in value.items()}
        return value

    def head(self, body: bytes, chars: int) -> tuple[str, bool]:
        """The start of ``body`` as text, masked and then cut: at most ``chars``
        characters, and whether anything was left out."""
        window = body[: (chars + self._longest) * 4]  # at least as many characters, or all
        text = window.decode("utf-8", errors="replace")
        whole = len(window) == len(body)
        if self._pattern is not None:
            text = self._mask_start(text, whole)
        return text[:chars], not whole or len(text) > chars

    def excerpt(
        self,
        body: bytes,
        chars: int,
        *,
        mark: str = "…",
        read: int | None = None,
        tidy: Callable[[str], str] | None = None,
    ) -> tuple[str, bool]:
        """The start of ``body`` as text, masked and only then cut to at most ``chars``
        characters, the last of them ``mark`` where anything was left out; and whether
        anything was.

        ``tidy`` rewrites the masked text before the cut and may shorten it (collapse
        whitespace, say); ``read`` characters of the body (default ``chars``) are
        masked for it, so that what it removes need not leave the excerpt short.
        """
        text, cut = self.head(body, chars if read is None else read)
        if tidy is not None:
            text = tidy(text)
        if not cut and len(text) <= chars:
            return text, False
        return text[: chars - len(mark)] + mark, True

    def _mask_start(self, text: str, whole: bool) -> str:
        """``text`` masked; when it is the start of something longer, also cut where a
        secret that runs past its end could begin."""
        assert self._pattern is not None
        end = len(text) if whole else max(0, len(text) - self._longest + 1)
        parts: list[str] = []
        position = 0
        for match in self._pattern.finditer(text):
            if match.start() >= end:
                break
            parts += (text[position : match.start()], MASK)
            position = match.end()
        parts.append(text[position:end])
        return "".join(parts)


NO_SECRETS: Final = Masker(())


@functools.lru_cache(maxsize=256)
def _cached(values: tuple[str, ...]) -> Masker:
    return Masker(values)


def masker_for(values: tuple[str, ...]) -> Masker:
    """The masker of these values, built once and kept while they are in use."""
    return _cached(values) if values else NO_SECRETS


def workspace_masker(secrets: Mapping[str, str]) -> Masker:
    """The masker of a workspace's secrets (by name, opened): what every approval,
    webhook and form shows of that workspace is masked with it."""
    return masker_for(tuple(sorted(secrets.values())))


__all__ = ["MASK", "NO_SECRETS", "Masker", "masker_for", "workspace_masker"]
