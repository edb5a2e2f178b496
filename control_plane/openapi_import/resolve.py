"""Schemas of an OpenAPI document as self-contained JSON Schema 2020-12.

A tool's inputSchema must stand alone (docs/architecture.md, "Schemas": ``$ref`` only within
the schema, never fetched), and many MCP hosts handle ``$ref`` poorly, so
every reference is inlined:

- ``$ref`` is followed only within the document (``#/...``); anything else is
  never fetched: it is cut (replaced by an unconstrained schema) and noted.
- A reference back into a schema that is being expanded (a recursive schema:
  a tree node whose children are tree nodes) is cut there, keeping only the
  target's ``type``; so is everything past ``MAX_DEPTH`` levels or beyond the
  node budget of one operation (a guard against exponential documents, YAML
  alias bombs included). Every cut is noted for the report.
- ``allOf`` is merged into one schema (properties and ``required`` united);
  parts that contradict each other stay an ``allOf``.
- OpenAPI 3.0 and Swagger 2.0 dialect becomes 2020-12: ``nullable`` adds
  ``null`` to the type, boolean ``exclusiveMinimum``/``Maximum`` become the
  numeric form, ``example`` becomes ``examples``, ``type: file`` a binary
  string; ``discriminator``, ``xml``, ``externalDocs`` and ``x-`` extensions
  are dropped, as are ``$id``/``$schema``/``$defs`` (nothing refers to them
  once everything is inlined).
- Request schemas lose ``readOnly`` properties, response schemas ``writeOnly``
  ones. Keywords with values JSON Schema refuses (a negative ``maxLength``, an
  unknown type), and regexes RE2 cannot compile (a backreference, a lookahead:
  Crank runs schema patterns on RE2, docs/architecture.md, "Schema patterns"),
  are dropped and noted.

Expansions that involved no cut are cached per reference, so a component used
by hundreds of operations is converted once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import unquote

from shared.engine.schema_patterns import pattern_problem

Mode = Literal["request", "response"]

MAX_DEPTH = 32
REQUEST_BUDGET = 20_000  # schema nodes in one operation's input
RESPONSE_BUDGET = 4_000
RESPONSE_DEPTH = 5  # the suggested select looks two levels deep at most

_TYPES = frozenset({"string", "integer", "number", "boolean", "object", "array", "null"})
_DROPPED = frozenset(
    {
        "discriminator",
        "xml",
        "externalDocs",
        "nullable",
        "example",
        "$id",
        "$schema",
        "$anchor",
        "$dynamicAnchor",
        "$comment",
        "$defs",
        "definitions",
        "$vocabulary",
        "collectionFormat",
    }
)
_SCHEMA_MAPS = ("properties", "patternProperties", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMA_VALUES = (
    "additionalProperties",
    "items",
    "not",
    "contains",
    "propertyNames",
    "if",
    "then",
    "else",
    "unevaluatedItems",
    "unevaluatedProperties",
    "contentSchema",
)
_NUMBERS = ("minimum", "maximum", "multipleOf")
_COUNTS = (
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "minContains",
    "maxContains",
)
_TEXTS = ("title", "description", "format", "contentMediaType", "contentEncoding")
_BOOLEANS = ("uniqueItems", "readOnly", "writeOnly", "deprecated")


class RefError(Exception):
    """A reference that does not resolve within the document."""


@dataclass(slots=True)
class _Run:
    mode: Mode
    budget: int
    max_depth: int
    silent: bool  # response analysis: cuts are expected, not worth a note
    cuts: int = 0
    notes: list[str] = field(default_factory=list)
    read_only_dropped: set[str] = field(default_factory=set)

    def cut(self, note: str) -> None:
        self.cuts += 1
        if not self.silent and note not in self.notes and len(self.notes) < 20:
            self.notes.append(note)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _regex_problem(pattern: Any) -> str | None:
    """Why a schema regex cannot be kept (Crank runs them on RE2), or None."""
    if not isinstance(pattern, str):
        return "not a string"
    return pattern_problem(pattern)


def _ref_name(ref: str) -> str:
    return unquote(ref.rsplit("/", 1)[-1]).replace("~1", "/").replace("~0", "~")


def add_null(schema: Any) -> Any:
    """``schema`` that also accepts null (3.0 ``nullable``)."""
    if not isinstance(schema, dict):
        return schema
    kind = schema.get("type")
    out = dict(schema)
    if isinstance(kind, str) and kind != "null":
        out["type"] = [kind, "null"]
    elif isinstance(kind, list) and "null" not in kind:
        out["type"] = [*kind, "null"]
    else:
        return schema
    if isinstance(out.get("enum"), list) and None not in out["enum"]:
        out["enum"] = [*out["enum"], None]
    return out


def _merge_types(first: Any, second: Any) -> Any:
    """The intersection of two ``type`` values; None when empty."""
    a = {first} if isinstance(first, str) else set(first)
    b = {second} if isinstance(second, str) else set(second)
    if "number" in a and "integer" in b:
        a.add("integer")
    if "number" in b and "integer" in a:
        b.add("integer")
    both = a & b
    if not both:
        return None
    ordered = [t for t in (first if isinstance(first, list) else [first]) if t in both]
    ordered += sorted(both - set(ordered))
    return ordered[0] if len(ordered) == 1 else ordered


def merge_all_of(parts: list[Any]) -> dict[str, Any] | None:
    """One schema equivalent to ``allOf: parts`` for the usual cases, or None.

    Properties are united (a property in two parts becomes an ``allOf`` of
    both), ``required`` too, types intersected; later ``title``/``description``
    win (the sibling keywords come last). Any other keyword with two different
    values means the parts cannot be merged safely.
    """
    result: dict[str, Any] = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    additional: list[Any] = []
    with_properties = 0
    for part in parts:
        if part is True or part == {}:
            continue
        if not isinstance(part, dict):
            return None
        if "properties" in part or "additionalProperties" in part:
            with_properties += 1
            additional.append(part.get("additionalProperties", True))
        for key, value in part.items():
            if key == "properties":
                for name, schema in value.items():
                    if name in properties and properties[name] != schema:
                        properties[name] = {"allOf": [properties[name], schema]}
                    else:
                        properties[name] = schema
            elif key == "required":
                required += [name for name in value if name not in required]
            elif key == "additionalProperties":
                continue
            elif key == "type" and "type" in result:
                merged = _merge_types(result["type"], value)
                if merged is None:
                    return None
                result["type"] = merged
            elif key in ("title", "description", "examples", "default", "deprecated"):
                result[key] = value
            elif key in result and result[key] != value:
                return None
            else:
                result[key] = value
    if properties:
        result["properties"] = properties
    if required:
        result["required"] = required
    # Closed objects stay closed only when every part that shapes properties agrees:
    # allOf [Base (additionalProperties: false), {extra props}] means "Base plus extras".
    if (
        with_properties
        and all(a == additional[0] for a in additional)
        and additional[0] is not True
    ):
        result["additionalProperties"] = additional[0]
    return result


class SchemaResolver:
    """Follows references within one document and converts its schemas."""

    def __init__(self, document: dict[str, Any], *, openapi_30: bool) -> None:
        self._document = document
        self._openapi_30 = openapi_30  # 2.0 and 3.0 share the pre-2020-12 dialect
        self._cache: dict[tuple[str, Mode], tuple[Any, int]] = {}

    def lookup(self, ref: str) -> Any:
        """The node a local ``#/...`` reference points at, or ``RefError``."""
        if not ref.startswith("#"):
            raise RefError(f"$ref {ref!r} points outside the document; it is never fetched")
        node: Any = self._document
        pointer = unquote(ref[1:])
        if not pointer:
            return node
        if not pointer.startswith("/"):
            raise RefError(f"$ref {ref!r} is not a JSON pointer")
        for raw in pointer[1:].split("/"):
            part = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, dict) and part.isdigit() and int(part) in node:
                node = node[int(part)]  # YAML read "200:" as an integer key
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise RefError(f"$ref {ref!r} does not resolve in the document")
        return node

    def follow(self, node: Any) -> Any:
        """A parameter, request body, response or path item with its ``$ref`` chain followed."""
        seen: set[str] = set()
        while isinstance(node, dict) and isinstance(node.get("$ref"), str):
            ref = node["$ref"]
            if ref in seen:
                raise RefError(f"$ref {ref!r} refers to itself")
            seen.add(ref)
            node = self.lookup(ref)
        return node

    def schema(self, node: Any, mode: Mode) -> tuple[Any, list[str]]:
        """The converted schema and the notes about what was cut or dropped."""
        if mode == "request":
            run = _Run(mode, REQUEST_BUDGET, MAX_DEPTH, silent=False)
        else:
            run = _Run(mode, RESPONSE_BUDGET, RESPONSE_DEPTH, silent=True)
        try:
            result = self._convert(node, run, (), 0)
        except RecursionError:
            return {}, ["a schema is nested too deeply to convert; left unconstrained"]
        return result, run.notes

    # -- conversion -------------------------------------------------------------

    def _convert(self, node: Any, run: _Run, stack: tuple[str, ...], depth: int) -> Any:
        if isinstance(node, bool):
            return node
        if not isinstance(node, dict):
            return {}
        if depth > run.max_depth:
            run.cut(f"schemas nested deeper than {run.max_depth} levels were left unconstrained")
            return {}
        run.budget -= 1
        if run.budget < 0:
            run.cut("the schema is too large; the rest was left unconstrained")
            return {}
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self._reference(node, ref, run, stack, depth)
        for dynamic in ("$dynamicRef", "$recursiveRef"):
            if dynamic in node:
                run.cut(f"{dynamic} {node[dynamic]!r} is not expanded; left unconstrained")
                return {}
        parts = node.get("allOf")
        if isinstance(parts, list) and parts:
            rest = {k: v for k, v in node.items() if k != "allOf"}
            converted = [self._convert(p, run, stack, depth + 1) for p in parts]
            if rest:
                converted.append(self._convert(rest, run, stack, depth))
            merged = merge_all_of(converted)
            return merged if merged is not None else {"allOf": converted}
        return self._keywords(node, run, stack, depth)

    def _reference(
        self, node: dict[str, Any], ref: str, run: _Run, stack: tuple[str, ...], depth: int
    ) -> Any:
        try:
            target = self.lookup(ref)
        except RefError as exc:
            run.cut(str(exc))
            return {}
        if ref in stack:
            run.cut(f"recursive schema {_ref_name(ref)!r} is cut where it refers to itself")
            kind = target.get("type") if isinstance(target, dict) else None
            stub: dict[str, Any] = {"description": f"A nested {_ref_name(ref)} (not expanded)."}
            if isinstance(kind, str) and kind in _TYPES:
                stub["type"] = kind
            return stub
        key = (ref, run.mode)
        cached = self._cache.get(key)
        if cached is not None:
            result, size = cached
            run.budget -= size
            if run.budget < 0:
                run.cut("the schema is too large; the rest was left unconstrained")
                return {}
        else:
            cuts, budget = run.cuts, run.budget
            result = self._convert(target, run, (*stack, ref), depth)
            if run.cuts == cuts:
                self._cache[key] = (result, budget - run.budget)
        siblings = {k: v for k, v in node.items() if k != "$ref"}
        if siblings:
            extra = self._keywords(siblings, run, stack, depth)
            if isinstance(result, dict):
                result = {**result, **extra}
            if self._openapi_30 and siblings.get("nullable") is True:
                result = add_null(result)
        return result

    def _child(self, value: Any, run: _Run, stack: tuple[str, ...], depth: int) -> Any:
        return self._convert(value, run, stack, depth + 1)

    def _properties(
        self, value: dict[Any, Any], run: _Run, stack: tuple[str, ...], depth: int
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        hidden = "readOnly" if run.mode == "request" else "writeOnly"
        for name, schema in value.items():
            converted = self._child(schema, run, stack, depth)
            if isinstance(converted, dict) and converted.get(hidden) is True:
                if run.mode == "request":
                    run.read_only_dropped.add(str(name))
                continue
            out[str(name)] = converted
        return out

    def _keywords(
        self, node: dict[str, Any], run: _Run, stack: tuple[str, ...], depth: int
    ) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for raw_key, value in node.items():
            key = str(raw_key)
            if key.startswith("x-") or key in _DROPPED or key == "allOf":
                continue
            if key == "properties" and isinstance(value, dict):
                out[key] = self._properties(value, run, stack, depth)
            elif key == "patternProperties" and isinstance(value, dict):
                kept: dict[Any, Any] = {}
                for name, schema in value.items():
                    problem = _regex_problem(name)
                    if problem is None:
                        kept[name] = schema
                    else:
                        run.cut(
                            f"patternProperties {name!r}: RE2 cannot compile it ({problem}); dropped"
                        )
                out[key] = {str(k): self._child(v, run, stack, depth) for k, v in kept.items()}
            elif key in _SCHEMA_MAPS and isinstance(value, dict):
                out[key] = {str(k): self._child(v, run, stack, depth) for k, v in value.items()}
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                out[key] = [self._child(v, run, stack, depth) for v in value]
            elif key == "items" and isinstance(value, list):  # draft-4 tuple form
                out["prefixItems"] = [self._child(v, run, stack, depth) for v in value]
            elif key in _SCHEMA_VALUES:
                if isinstance(value, dict | bool):
                    out[key] = self._child(value, run, stack, depth)
            elif key == "type":
                kind = self._type(value, run)
                if kind is not None:
                    out[key] = kind
            elif key == "pattern":
                problem = _regex_problem(value)
                if problem is None:
                    out[key] = value
                else:
                    run.cut(f"pattern {value!r}: RE2 cannot compile it ({problem}); dropped")
            elif key == "required":
                if isinstance(value, list):
                    out[key] = list(dict.fromkeys(str(v) for v in value if isinstance(v, str)))
            elif key in ("enum", "examples"):
                if isinstance(value, list) and value:
                    out[key] = value
            elif key in _NUMBERS:
                if _is_number(value) and not (key == "multipleOf" and value <= 0):
                    out[key] = value
            elif key in _COUNTS:
                if _is_number(value) and value >= 0 and int(value) == value:
                    out[key] = int(value)
            elif key in _TEXTS:
                if isinstance(value, str):
                    out[key] = value
            elif key in _BOOLEANS:
                if isinstance(value, bool):
                    out[key] = value
            elif key in ("exclusiveMinimum", "exclusiveMaximum"):
                continue  # below: its meaning depends on the dialect and on minimum/maximum
            elif key == "dependentRequired" and isinstance(value, dict):
                out[key] = value
            else:
                out[key] = value  # const, default, and annotations of other vocabularies
        for key, bound in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
            value = node.get(key)
            if _is_number(value):
                out[key] = value
            elif value is True and _is_number(node.get(bound)):  # the pre-2019 boolean form
                out[key] = out.pop(bound, node[bound])
        if self._openapi_30:
            if "example" in node and "examples" not in out:
                out["examples"] = [node["example"]]
            if node.get("nullable") is True:
                out = add_null(out)
        if run.mode == "request" and isinstance(out.get("required"), list):
            properties = out.get("properties")
            if isinstance(properties, dict):
                out["required"] = [
                    n for n in out["required"] if n in properties or n not in run.read_only_dropped
                ]
        return out

    def _type(self, value: Any, run: _Run) -> Any:
        if value == "file":  # Swagger 2.0
            return "string"
        if isinstance(value, str):
            kind = value.lower()
            if kind in _TYPES:
                return kind
            run.cut(f"type {value!r} is not a JSON Schema type; dropped")
            return None
        if isinstance(value, list):
            kinds = [k.lower() for k in value if isinstance(k, str) and k.lower() in _TYPES]
            kinds = list(dict.fromkeys(kinds))
            if kinds:
                return kinds[0] if len(kinds) == 1 else kinds
        return None
