"""Every spelling in which an upstream may echo a secret back, for the masking tests."""

from __future__ import annotations

import base64
import json
import re
from urllib.parse import quote, quote_plus

import msgspec


def spellings(value: str) -> dict[str, str]:
    """``value`` as JSON, URL and base64 encoders write it, by a name for each spelling."""
    raw = value.encode()
    every = "".join(c if c.isascii() and c.isalnum() else f"\\u{ord(c):04X}" for c in value)
    return {
        "raw": value,
        "msgspec": msgspec.json.encode(value).decode()[1:-1],
        "json ascii": json.dumps(value)[1:-1],
        "json slash": json.dumps(value)[1:-1].replace("/", "\\/"),
        "json every escaped": every,
        # Letters and digits too, as an upstream may write a whole string (lower or upper hex).
        "json every character escaped": "".join(f"\\u{ord(c):04x}" for c in value),
        "json every character escaped upper": "".join(f"\\u{ord(c):04X}" for c in value),
        "json every other letter escaped": "".join(
            c if n % 2 and c.isascii() and c.isalnum() else f"\\u{ord(c):04X}"
            for n, c in enumerate(value)
        ),
        "json mixed": value.replace("/", "\\u002f").replace('"', '\\"'),
        "quote": quote(value, safe=""),
        "quote keeps slash": quote(value),
        "quote lower hex": re.sub("%[0-9A-F]{2}", lambda m: m[0].lower(), quote(value, safe="")),
        "quote_plus": quote_plus(value),
        "base64": base64.b64encode(raw).decode(),
        "base64 unpadded": base64.b64encode(raw).decode().rstrip("="),
        "base64 urlsafe": base64.urlsafe_b64encode(raw).decode(),
        "base64 urlsafe unpadded": base64.urlsafe_b64encode(raw).decode().rstrip("="),
    }


def leaks(text: str, secrets: list[str]) -> list[str]:
    """The names of the spellings of ``secrets`` found in ``text``."""
    return [
        f"{name} of secret {index}"
        for index, secret in enumerate(secrets)
        for name, spelling in spellings(secret).items()
        if spelling in text
    ]
