"""Tool arguments for the fuzzer: any JSON value, arguments drawn from a tool's
input schema, and arguments one mutation away from them, with an independent
judge of which the schema accepts.

- ``json_values``: any JSON value (deep, wide, big integers, odd strings).
- ``valid_arguments(tool)``: arguments the tool's input schema accepts, drawn
  from the schema itself (schemathesis's JSON Schema generator, with format
  strategies for every format the compiler checks).
- ``mutated_arguments(tool)``: such arguments with one node dropped, replaced
  or added, which the schema may or may not still accept.
- ``reference_valid(tool, arguments)``: whether it does, judged by
  jsonschema-rs (ECMA-262 regexes, as JSON Schema means them), not by the
  gateway's own validator.
"""

from __future__ import annotations

import json
from datetime import UTC
from typing import Any

import jsonschema_rs
import re2
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from schemathesis.core.jsonschema import CANONICALIZE_DRAFT_BY_VALIDATOR
from schemathesis.generation.jsonschema.builder import build

from tests.gateway.fuzz.catalog import INPUT_SCHEMAS

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30)
)
lone_surrogates = st.text(alphabet=st.characters(categories=["Cs"]), min_size=1, max_size=3)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=5) | st.dictionaries(st.text(max_size=12), children, max_size=5)
    ),
    max_leaves=20,
)


def dumps(value: Any) -> bytes:
    """``value`` as UTF-8 JSON; a lone surrogate stays, as bytes no UTF-8 decoder takes."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass")


_FORMATS: dict[str, st.SearchStrategy[Any]] = {
    "email": st.emails(),
    "date": st.dates().map(lambda d: d.isoformat()),
    "date-time": st.datetimes(timezones=st.just(UTC)).map(lambda d: d.isoformat()),
    "time": st.times(timezones=st.just(UTC)).map(lambda t: t.isoformat()),
    "ipv4": st.ip_addresses(v=4).map(str),
    "ipv6": st.ip_addresses(v=6).map(str),
    "uuid": st.uuids().map(str),
    "regex": st.sampled_from(["", "^a+$", "[0-9]{2,4}", "x|y", "(?i)abc", "\\d+\\.\\d*"]),
}
_DRAFT = CANONICALIZE_DRAFT_BY_VALIDATOR[jsonschema_rs.Draft202012Validator]
# The independent judge of validity: jsonschema-rs (ECMA-262 regexes, as JSON
# Schema means them), formats judged apart by ``_format_ok``.
_REFERENCE = {
    name: jsonschema_rs.Draft202012Validator(schema, validate_formats=False)
    for name, schema in INPUT_SCHEMAS.items()
}
_FORMAT_CHECKER = Draft202012Validator.FORMAT_CHECKER


def _format_ok(tool: str, arguments: Any) -> bool:
    """Every string under a ``format`` property conforms: jsonschema's checkers, and for
    ``regex`` a pattern RE2 compiles (docs/architecture.md, "Schema patterns")."""
    properties = INPUT_SCHEMAS[tool].get("properties", {})
    if not isinstance(arguments, dict):
        return True
    for name, value in arguments.items():
        declared = properties.get(name, {}).get("format")
        if declared is None or not isinstance(value, str):
            continue
        if declared == "regex":
            try:
                re2.compile(value)
            except re2.error:
                return False
        elif not _FORMAT_CHECKER.conforms(value, declared):
            return False
    return True


def reference_valid(tool: str, arguments: Any) -> bool:
    """Whether ``tool``'s input schema accepts ``arguments`` (absent arguments are ``{}``)."""
    arguments = {} if arguments is None else arguments
    return _REFERENCE[tool].is_valid(arguments) and _format_ok(tool, arguments)


def valid_arguments(tool: str) -> st.SearchStrategy[dict[str, Any]]:
    strategy = build(INPUT_SCHEMAS[tool], draft=_DRAFT, formats=_FORMATS, whole_floats=True)
    return strategy.filter(lambda value: reference_valid(tool, value))  # type: ignore[return-value]


def _nodes(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The path of every node under ``value`` (the root excluded)."""
    found: list[tuple[Any, ...]] = []
    children = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for key, child in children:
        found.append((*path, key))
        found += _nodes(child, (*path, key))
    return found


def _replaced(value: Any, path: tuple[Any, ...], new: Any, *, drop: bool = False) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        copy = dict(value)
        if drop and not rest:
            del copy[head]
        else:
            copy[head] = _replaced(value[head], rest, new, drop=drop) if rest else new
        return copy
    items = list(value)
    if drop and not rest:
        del items[head]
    else:
        items[head] = _replaced(value[head], rest, new, drop=drop) if rest else new
    return items


@st.composite
def _mutation(draw: st.DrawFn, arguments: dict[str, Any]) -> Any:
    nodes = _nodes(arguments)
    choice = draw(
        st.sampled_from(("replace", "drop", "add", "whole") if nodes else ("add", "whole"))
    )
    if choice == "whole":  # not an object at all, or another object
        return draw(json_values)
    if choice == "add":
        containers = [(), *(p for p in nodes if isinstance(_at(arguments, p), dict))]
        where = draw(st.sampled_from(containers))
        key = draw(st.text(min_size=1, max_size=12))
        return _replaced(arguments, (*where, key), draw(json_values))
    path = draw(st.sampled_from(nodes))
    if choice == "drop":
        return _replaced(arguments, path, None, drop=True)
    return _replaced(arguments, path, draw(json_values | json_scalars))


def _at(value: Any, path: tuple[Any, ...]) -> Any:
    for key in path:
        value = value[key]
    return value


def mutated_arguments(tool: str) -> st.SearchStrategy[Any]:
    return valid_arguments(tool).flatmap(_mutation)
