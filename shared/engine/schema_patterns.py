"""The regexes of input schemas, run by RE2: time linear in the text, whatever the pattern.

JSON Schema's ``pattern``, ``patternProperties`` and ``format: regex`` are
ECMA-262 regexes, unanchored (a search). Python's ``re`` backtracks, so
``^(a+)+$`` against 30 ``a`` and a ``!`` takes minutes; RE2 (``google-re2``)
has no backtracking and answers in time linear in the text. Every schema
regex Crank evaluates goes through this module; nothing compiles one with
``re`` (docs/architecture.md, "Schema patterns").

The dialect is RE2's syntax, plus ECMA's ``\\uXXXX`` and ``\\u{X...}`` escapes
(rewritten to RE2's ``\\x{...}``). What RE2 has no linear-time answer for
(backreferences, lookahead and lookbehind) does not compile: a write refuses
such a pattern with RE2's reason, the OpenAPI import drops it with a note, and
a stored schema that holds one fails closed (``SchemaPattern.problem``).
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import msgspec
import re2
from referencing.jsonschema import DRAFT202012

__all__ = [
    "ARGUMENT_PATTERN_MEMORY",
    "MAX_ARGUMENT_PATTERN_LENGTH",
    "MAX_SCHEMA_PATTERN_LENGTH",
    "SCHEMA_PATTERN_MEMORY",
    "PatternError",
    "SchemaPattern",
    "compile_pattern",
    "found",
    "pattern_problem",
    "prepare_schema",
    "search",
    "subschemas",
]

SCHEMA_PATTERN_MEMORY = 8 << 20  # RE2's default budget; a larger pattern is "too large"
ARGUMENT_PATTERN_MEMORY = 1 << 20  # a ``format: regex`` argument: a caller's text
# Compiling is linear too, but a long pattern costs tens of milliseconds (and RE2
# logs to stderr on some): longer ones are refused before RE2 sees them.
MAX_SCHEMA_PATTERN_LENGTH = 10_000
MAX_ARGUMENT_PATTERN_LENGTH = 1_000
_HEX = frozenset("0123456789abcdefABCDEF")


class PatternError(ValueError):
    """A regex RE2 cannot compile; the message is RE2's reason."""


def _ecma_escapes(pattern: str) -> str:
    """``\\u00e9`` and ``\\u{1F600}`` as RE2's ``\\x{...}``; every other escape as written."""
    if "\\u" not in pattern:
        return pattern
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        char = pattern[i]
        if char != "\\" or i + 1 == n:
            out.append(char)
            i += 1
            continue
        if pattern[i + 1] == "u":
            four = pattern[i + 2 : i + 6]
            if len(four) == 4 and set(four) <= _HEX:
                out.append(f"\\x{{{four}}}")
                i += 6
                continue
            close = pattern.find("}", i + 3) if pattern[i + 2 : i + 3] == "{" else -1
            digits = pattern[i + 3 : close]
            if close != -1 and 0 < len(digits) <= 6 and set(digits) <= _HEX:
                out.append(f"\\x{{{digits}}}")
                i = close + 1
                continue
        out.append(pattern[i : i + 2])  # an escape is two characters at least: keep it whole
        i += 2
    return "".join(out)


def _options(max_mem: int) -> re2.Options:
    options = re2.Options()
    options.max_mem = max_mem
    options.log_errors = False  # RE2 would print every refused pattern to stderr
    options.never_capture = True  # only "is there a match" is ever asked
    return options


_SCHEMA_OPTIONS = _options(SCHEMA_PATTERN_MEMORY)
_ARGUMENT_OPTIONS = _options(ARGUMENT_PATTERN_MEMORY)


def compile_pattern(pattern: str, *, argument: bool = False) -> Any:
    """The compiled RE2 regex of ``pattern``, or ``PatternError`` with RE2's reason.

    ``argument``: the pattern is a caller's value (``format: regex``), so it
    gets a smaller memory budget and length limit.
    """
    options = _ARGUMENT_OPTIONS if argument else _SCHEMA_OPTIONS
    limit = MAX_ARGUMENT_PATTERN_LENGTH if argument else MAX_SCHEMA_PATTERN_LENGTH
    if len(pattern) > limit:
        raise PatternError(f"longer than {limit} characters")
    try:
        return re2.compile(_ecma_escapes(pattern), options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "does not compile"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise PatternError(str(reason)) from None


@functools.lru_cache(maxsize=4096)
def pattern_problem(pattern: str) -> str | None:
    """RE2's reason for refusing ``pattern`` as a schema regex, or None when it compiles.

    Remembered: a file of thousands of operations repeats a few patterns, and each
    is judged by validation and by the linter (docs/architecture.md, "Apply in batches")."""
    try:
        compile_pattern(pattern)
    except PatternError as exc:
        return str(exc)
    return None


class SchemaPattern(str):
    """A schema's regex text with its compiled RE2 regex, made once per text (_loose).

    A ``str``, so jsonschema reads and words it as the pattern it was;
    ``regex`` is None (and ``problem`` says why) for a pattern RE2 refuses,
    which then matches nothing: a stored schema written before the check
    fails closed instead of reaching a backtracking engine.
    """

    regex: Any
    problem: str | None

    def __new__(cls, text: str) -> SchemaPattern:
        made = super().__new__(cls, text)
        try:
            made.regex, made.problem = compile_pattern(text), None
        except PatternError as exc:
            made.regex, made.problem = None, f"RE2 cannot compile it: {exc}"
        return made


# One compiled regex per pattern text for the whole process: a catalog of
# thousands of tools repeats a few patterns (^[A-Z]{3}$ ...), and RE2's
# compile is the costliest step of compiling a tool.
@functools.lru_cache(maxsize=4096)
def _loose(pattern: str) -> SchemaPattern:
    return SchemaPattern(pattern)


def _schema_pattern(pattern: str) -> SchemaPattern:
    # A pattern outside the places prepare_schema rewrites (a $ref into an
    # "examples" value, say) is compiled here, still with RE2, once per text.
    return pattern if isinstance(pattern, SchemaPattern) else _loose(pattern)


def found(regex: Any, text: str) -> bool:
    """Whether compiled ``regex`` matches anywhere in ``text`` (JSON Schema's unanchored match).

    The text goes in as UTF-8 bytes: the wrapper's own str path maps every
    offset back to characters, which costs more than the match. A lone
    surrogate (no JSON parser here lets one through) is kept, not an exception.
    """
    return regex.search(text.encode("utf-8", "surrogatepass")) is not None


def search(pattern: str, text: str) -> bool:
    """``found`` for a schema's pattern text; ``PatternError`` for a pattern RE2 refuses."""
    compiled = _schema_pattern(pattern)
    if compiled.regex is None:
        raise PatternError(compiled.problem or "does not compile")
    return found(compiled.regex, text)


def subschemas(root: Any) -> Iterator[dict[str, Any]]:
    """Every subschema (dicts only) of a 2020-12 schema, as referencing lists them."""
    stack = [root]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            yield node
            stack.extend(DRAFT202012.subresources_of(node))


def prepare_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``schema`` whose ``pattern`` values and ``patternProperties`` keys
    are ``SchemaPattern``: every regex compiled once, with RE2, before any call."""
    copy: dict[str, Any] = msgspec.json.decode(msgspec.json.encode(schema))
    for node in subschemas(copy):
        pattern = node.get("pattern")
        if isinstance(pattern, str):
            node["pattern"] = _loose(pattern)
        by_pattern = node.get("patternProperties")
        if isinstance(by_pattern, dict):
            node["patternProperties"] = {_loose(k): v for k, v in by_pattern.items()}
    return copy
