"""JMESPath, compiled once, with plain-dict fast paths for the common shapes.

Most mappings and selections are a bare identifier (``base``), a dotted path
of identifiers (``rates.EUR``) or a top-level multiselect hash of those
(``{base: base, date: date}``). ``compile_expression`` turns those into
dictionary look-ups; everything else is ``jmespath.compile``. The fast
paths keep JMESPath's semantics for JSON values (dict, list, str, int, float,
bool, None): a field of anything that is not an object is null, a missing
key is null, a path stops at null, and a multiselect hash of null is null.
``tests/shared/test_jmes.py`` checks them against jmespath itself.
"""

from __future__ import annotations

from typing import Any, Protocol, cast

import jmespath

__all__ = ["Expression", "compile_expression"]


class Expression(Protocol):
    def search(self, value: Any) -> Any: ...


class _Path:
    """``a`` or ``a.b.c``: identifiers only."""

    __slots__ = ("_names",)

    def __init__(self, names: tuple[str, ...]) -> None:
        self._names = names

    def search(self, value: Any) -> Any:
        for name in self._names:
            if not isinstance(value, dict):
                return None
            value = value.get(name)
        return value


class _Hash:
    """``{key: path, ...}`` at the top level."""

    __slots__ = ("_pairs",)

    def __init__(self, pairs: tuple[tuple[str, _Path], ...]) -> None:
        self._pairs = pairs

    def search(self, value: Any) -> Any:
        if value is None:
            return None
        return {key: path.search(value) for key, path in self._pairs}


def _path(node: dict[str, Any]) -> _Path | None:
    if node.get("type") == "field":
        return _Path((node["value"],))
    if node.get("type") == "subexpression":
        children = node["children"]
        if all(child.get("type") == "field" for child in children):
            return _Path(tuple(child["value"] for child in children))
    return None


def compile_expression(expression: str) -> Expression:
    """Raises ``jmespath.exceptions.ParseError`` as ``jmespath.compile`` does."""
    compiled = jmespath.compile(expression)
    ast = cast(dict[str, Any], compiled.parsed)
    path = _path(ast)
    if path is not None:
        return path
    if ast.get("type") == "multi_select_dict":
        pairs = []
        for child in ast["children"]:
            value = _path(child["children"][0])
            if value is None:
                return compiled
            pairs.append((child["value"], value))
        return _Hash(tuple(pairs))
    return compiled


# Nodes whose children after the first are evaluated on the first one's result (or on
# each of its elements), not on the value the expression starts from.
_LEFT_ONLY_AT_ROOT = frozenset(
    {"subexpression", "index_expression", "projection", "value_projection", "filter_projection"}
    | {"pipe"}
)


def root_fields(expression: str) -> set[str]:
    """The names an expression reads from the top of the value it is given (``{a: a, b:
    c.d}``: a and c); raises jmespath's ParseError on an expression it cannot read."""
    found: set[str] = set()
    stack: list[dict[str, Any]] = [cast(dict[str, Any], jmespath.compile(expression).parsed)]
    while stack:
        node = stack.pop()
        kind = node.get("type")
        if kind == "field":
            found.add(node["value"])
        elif kind in _LEFT_ONLY_AT_ROOT:
            stack.append(node["children"][0])
        elif kind != "expref":  # &expr is evaluated on each element, later
            stack.extend(child for child in node.get("children", ()) if isinstance(child, dict))
    return found
