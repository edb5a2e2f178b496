"""Response selection: upstream status, headers and body → ``Selected`` or a ``ToolError``.

A success (2xx) body is parsed as JSON, ``response.select`` (JMESPath,
compiled once) picks what the model needs, every array anywhere in the result
is capped to ``response.max_items``, and then ``response.max_bytes`` is
enforced on the encoded result by halving the longest array until it fits;
if it cannot fit with every array emptied, ``upstream_response_too_large``.
Any trimming sets ``Selected.truncated`` (the gateway reports it in ``_meta``).

Other statuses map to error codes (docs/architecture.md, "Error codes"): 429 →
upstream_rate_limited (``retry_after_s`` from Retry-After), 502/503/504 →
upstream_unavailable, other 5xx → upstream_error, 400/422 and every other 4xx
→ upstream_bad_request, 401/403 → upstream_auth_failed, 404 →
upstream_not_found, 409 → upstream_conflict. The message never contains the
upstream body; ``details`` carries the status and a short, masked excerpt.

Further decisions:

- 408 → upstream_timeout and 410 → upstream_not_found (closer than
  bad_request); a 3xx that reaches the selector (the executor follows
  redirects) → upstream_response_invalid.
- The body is parsed as JSON whatever its Content-Type (APIs mislabel it).
  A success body that is not JSON is upstream_response_invalid when the
  operation has a ``select``; without one it becomes ``{"text": ...}``
  (decoded as UTF-8, invalid bytes replaced), cut to fit ``max_bytes``.
- An empty success body (e.g. 204) selects to ``None``.
- A ``select`` that fails on the answer at run time (a JMESPath type error)
  is upstream_response_invalid: the answer does not have the expected shape.
- Retry-After (delta seconds or an HTTP date) is bounded to 0..3600 s and
  also kept on 503 (upstream_unavailable), the other status that sends it.
- ``max_bytes`` counts the selected value's compact JSON, before the
  ``{"items": [...]}`` wrapping of ``structured_content``.
- A success body that could decode to more than ``max_nodes`` JSON values
  and keys is upstream_response_too_large before it is decoded, and one
  nested deeper than the decoder goes is upstream_response_invalid
  (docs/architecture.md, "Upstream answers").
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jmespath
import jmespath.exceptions
import msgspec

from shared.engine import outbound
from shared.engine.answer_limits import DEFAULT_MAX_JSON_NODES, json_node_bound
from shared.engine.errors import ErrorCode, Language, ToolError
from shared.engine.jmes import compile_expression
from shared.engine.masking import NO_SECRETS, Masker

MAX_RETRY_AFTER_S = 3600
EXCERPT_CHARS = 200
_EXCERPT_WINDOW = EXCERPT_CHARS * 4  # characters read before runs of whitespace are collapsed
_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()
_WHITESPACE = re.compile(r"\s+")

Headers = Mapping[str, str] | Iterable[tuple[str, str]]


@dataclass(frozen=True, slots=True)
class Selected:
    """The selected result; ``truncated`` when arrays were cut to the item or byte limit."""

    value: Any
    truncated: bool


def structured_content(value: Any, *, wrap_arrays: bool) -> Any:
    """The result as ``structuredContent``: an array becomes ``{"items": [...]}``
    when ``wrap_arrays`` (the 2025 protocol versions need an object at the root)."""
    if wrap_arrays and isinstance(value, list):
        return {"items": value}
    return value


def header_value(headers: Headers, name: str) -> str | None:
    """A header's first value, by case-insensitive name."""
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    wanted = name.lower()
    for key, value in pairs:
        if key.lower() == wanted:
            return value
    return None


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> int | None:
    """Retry-After as whole seconds within 0..MAX_RETRY_AFTER_S; None if absent or unreadable."""
    seconds = outbound.parse_retry_after(value, now=None if now is None else now.timestamp())
    return None if seconds is None else max(0, min(MAX_RETRY_AFTER_S, math.ceil(seconds)))


def _one_line(text: str) -> str:
    return _WHITESPACE.sub(" ", "".join(c if c.isprintable() else " " for c in text)).strip()


def excerpt(body: bytes, masker: Masker = NO_SECRETS) -> str:
    """A short, single-line, masked excerpt of an upstream body (masked before it is cut)."""
    # EXCERPT_CHARS and the ellipsis after them.
    text, _ = masker.excerpt(body, EXCERPT_CHARS + 1, read=_EXCERPT_WINDOW, tidy=_one_line)
    return text


def code_for_status(status: int) -> ErrorCode:
    """The error code of a non-success upstream status."""
    if status == 429:
        return "upstream_rate_limited"
    if status in (502, 503, 504):
        return "upstream_unavailable"
    if status >= 500:
        return "upstream_error"
    if status in (401, 403):
        return "upstream_auth_failed"
    if status in (404, 410):
        return "upstream_not_found"
    if status == 409:
        return "upstream_conflict"
    if status == 408:
        return "upstream_timeout"
    if status >= 400:
        return "upstream_bad_request"
    return "upstream_response_invalid"  # 1xx/3xx: nothing to select


def error_for_status(
    status: int,
    headers: Headers,
    body: bytes,
    *,
    masker: Masker = NO_SECRETS,
    language: Language = "en",
    now: datetime | None = None,
) -> ToolError:
    code = code_for_status(status)
    retry_after = None
    if code in ("upstream_rate_limited", "upstream_unavailable"):
        retry_after = parse_retry_after(header_value(headers, "Retry-After"), now=now)
    return ToolError.of(
        code,
        language=language,
        retry_after_s=retry_after,
        details={"upstream_status": status, "upstream_text": excerpt(body, masker)},
        status=status,
    )


def _cap(value: Any, limit: int) -> tuple[Any, bool]:
    """A copy of ``value`` with every array cut to ``limit`` items."""
    if isinstance(value, list):
        truncated = len(value) > limit
        items = []
        for item in value[:limit]:
            copy, cut = _cap(item, limit)
            items.append(copy)
            truncated = truncated or cut
        return items, truncated
    if isinstance(value, dict):
        result = {}
        truncated = False
        for key, item in value.items():
            result[key], cut = _cap(item, limit)
            truncated = truncated or cut
        return result, truncated
    return value, False


def _longest_array(value: Any) -> list[Any] | None:
    best: list[Any] | None = None
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, list):
            if node and (best is None or len(node) > len(best)):
                best = node
            stack.extend(node)
        elif isinstance(node, dict):
            stack.extend(node.values())
    return best


def _size(value: Any) -> int:
    return len(_encoder.encode(value))


class ResponseSelector:
    """Compiled once per published operation version; ``select`` per call."""

    def __init__(
        self, *, select: str | None, max_items: int, max_bytes: int, language: Language = "en"
    ) -> None:
        self._select = None if select is None else compile_expression(select)
        self._max_items = max_items
        self._max_bytes = max_bytes
        self._language: Language = language

    def _error(
        self, code: ErrorCode, status: int, body: bytes, masker: Masker, reason: str | None = None
    ) -> ToolError:
        details: dict[str, Any] = {
            "upstream_status": status,
            "upstream_text": excerpt(body, masker),
        }
        if reason is not None:
            details["reason"] = reason
        return ToolError.of(code, language=self._language, details=details)

    def select(
        self,
        status: int,
        headers: Headers,
        body: bytes,
        *,
        masker: Masker = NO_SECRETS,
        max_nodes: int = DEFAULT_MAX_JSON_NODES,
    ) -> Selected:
        """``masker`` hides the secrets of the request in whatever is selected or quoted;
        ``max_nodes`` bounds the JSON values and keys the body may decode to."""
        if not 200 <= status < 300:
            raise error_for_status(status, headers, body, masker=masker, language=self._language)
        if not body.strip():
            return Selected(None, False)
        # Every value or key takes a byte at least: a short body needs no count.
        if len(body) >= max_nodes and json_node_bound(body) > max_nodes:
            reason = f"more than {max_nodes} JSON values and keys"
            raise self._error("upstream_response_too_large", status, body, masker, reason)
        try:
            data = _decoder.decode(body)
        except RecursionError:  # nested deeper than the decoder goes
            raise self._error("upstream_response_invalid", status, body, masker) from None
        except msgspec.DecodeError:
            if self._select is not None:
                raise self._error("upstream_response_invalid", status, body, masker) from None
            # Only the head can fit: mask (before any cut) and keep that much.
            text, cut = masker.head(body, self._max_bytes)
            return self._fit_text(text, cut, status, body, masker)
        try:
            if self._select is not None:
                data = self._select.search(data)
            # Cap first (it drops whole items, never cuts a string), so masking walks
            # only what can reach the model; then measure the masked value.
            value, truncated = _cap(data, self._max_items)
            # An upstream that echoes its credentials must not hand them to the model.
            value = masker.value(value)
            return self._fit(value, truncated, status, body, masker)
        # A selection that fails on this answer (``length(x)`` where x is a number)
        # means the API answered in a shape the tool does not expect: the same
        # code as an unreadable body, not an internal_error.
        except (RecursionError, jmespath.exceptions.JMESPathError):
            raise self._error("upstream_response_invalid", status, body, masker) from None

    def _fit(
        self, value: Any, truncated: bool, status: int, body: bytes, masker: Masker
    ) -> Selected:
        size = _size(value)
        while size > self._max_bytes:
            longest = _longest_array(value)
            if longest is None:
                raise self._error("upstream_response_too_large", status, body, masker)
            del longest[len(longest) // 2 :]
            truncated = True
            size = _size(value)
        return Selected(value, truncated)

    def _fit_text(
        self, text: str, truncated: bool, status: int, body: bytes, masker: Masker
    ) -> Selected:
        value = {"text": text}
        size = _size(value)
        while size > self._max_bytes:
            if not text:
                raise self._error("upstream_response_too_large", status, body, masker)
            # Cut in proportion to the overshoot; always at least one character.
            keep = min(len(text) - 1, len(text) * self._max_bytes // size - 1)
            text = text[: max(0, keep)]
            value = {"text": text}
            size = _size(value)
            truncated = True
        return Selected(value, truncated)
