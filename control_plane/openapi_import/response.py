"""A 2xx JSON response schema → a suggested ``response.select`` and its ``output_schema``.

The model rarely needs a whole upstream object (tool-design: return only what
the next step needs), so the suggestion keeps up to ``MAX_FIELDS`` scalar
fields (identifiers, names and status first, then required ones, then in
declared order) and, for collection wrappers (``{"total_count": 3, "items":
[...]}``), up to two arrays of objects projected the same way. Even when
every field is kept the select is set: the result then has a known shape.

``output_schema`` describes exactly what the select yields (docs/architecture.md, "Schemas":
every successful structuredContent must match it). A JMESPath multiselect yields
null for a field the upstream left out, and upstream documents are not always
right about nullability, so every selected field is typed ``[type, "null"]``
with no ``required`` and no constraints beyond the type: a promise the
gateway can keep.
"""

from __future__ import annotations

import json
import re
from typing import Any

MAX_FIELDS = 12
MAX_COLLECTIONS = 2
_SCALARS = frozenset({"string", "integer", "number", "boolean"})
_PREFERRED = (
    "id",
    "uid",
    "uuid",
    "key",
    "slug",
    "name",
    "title",
    "login",
    "email",
    "status",
    "state",
    "type",
    "kind",
    "number",
    "url",
    "html_url",
    "created_at",
    "updated_at",
)
_COLLECTIONS = ("items", "data", "results", "records", "entries", "values", "list")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_JSON_MEDIA = re.compile(r"^application/([\w.+-]*\+)?json\b|^\*/\*$|^application/\*$", re.I)


def jmespath_identifier(name: str) -> str:
    """``name`` as a JMESPath identifier: bare when it can be, else quoted."""
    return name if _IDENTIFIER.fullmatch(name) else json.dumps(name)


def is_json_media(media_type: str) -> bool:
    """Whether a media type carries JSON: ``application/json``, any ``+json``, or a wildcard."""
    return bool(_JSON_MEDIA.match(media_type.strip()))


def _scalar_type(schema: Any) -> list[str] | None:
    """The scalar types a property may have (plus null), or None if not a scalar."""
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
    if not kinds:
        enum = schema.get("enum")
        if isinstance(enum, list) and enum and all(isinstance(v, str) for v in enum):
            kinds = ["string"]
    real = [k for k in kinds if k != "null"]
    if real and all(k in _SCALARS for k in real):
        return [*real, "null"]
    return None


def _properties(schema: Any) -> dict[str, Any] | None:
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind not in (None, "object") and not (isinstance(kind, list) and "object" in kind):
        return None
    properties = schema.get("properties")
    return properties if isinstance(properties, dict) and properties else None


def _field_schema(schema: dict[str, Any], kinds: list[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kinds}
    description = schema.get("description")
    if isinstance(description, str) and description:
        out["description"] = description
    return out


def _pick(properties: dict[str, Any], required: Any) -> list[str]:
    scalars = [name for name, s in properties.items() if _scalar_type(s) is not None]
    ordered = [name for name in _PREFERRED if name in scalars]
    if isinstance(required, list):
        ordered += [n for n in required if n in scalars and n not in ordered]
    ordered += [n for n in scalars if n not in ordered]
    return ordered[:MAX_FIELDS]


def _projection(schema: Any) -> tuple[str, dict[str, Any]] | None:
    """(multiselect expression, object schema) keeping the picked scalar fields."""
    properties = _properties(schema)
    if properties is None:
        return None
    assert isinstance(schema, dict)
    names = _pick(properties, schema.get("required"))
    if not names:
        return None
    fields = {
        name: _field_schema(properties[name], _scalar_type(properties[name]) or [])
        for name in names
    }
    expression = ", ".join(f"{jmespath_identifier(n)}: {jmespath_identifier(n)}" for n in names)
    return f"{{{expression}}}", {"type": "object", "properties": fields}


def _items_of(schema: Any) -> Any:
    if not isinstance(schema, dict):
        return None
    kind = schema.get("type")
    if kind == "array" or (isinstance(kind, list) and "array" in kind):
        return schema.get("items")
    return None


def suggest(schema: Any) -> tuple[str | None, dict[str, Any] | None]:
    """(select, output_schema) for a converted response schema; (None, None) when unsure."""
    items = _items_of(schema)
    if items is not None:
        projected = _projection(items)
        if projected is None:
            return None, None
        expression, item_schema = projected
        return f"[*].{expression}", {"type": "array", "items": item_schema}
    properties = _properties(schema)
    if properties is None:
        return None, None
    assert isinstance(schema, dict)
    names = _pick(properties, schema.get("required"))
    collections = [
        name
        for name in sorted(
            (n for n, s in properties.items() if _projection(_items_of(s)) is not None),
            key=lambda n: (n not in _COLLECTIONS, list(properties).index(n)),
        )
    ][:MAX_COLLECTIONS]
    if not names and not collections:
        return None, None
    parts = [f"{jmespath_identifier(n)}: {jmespath_identifier(n)}" for n in names]
    fields: dict[str, Any] = {
        n: _field_schema(properties[n], _scalar_type(properties[n]) or []) for n in names
    }
    for name in collections:
        projected = _projection(_items_of(properties[name]))
        assert projected is not None
        expression, item_schema = projected
        parts.append(f"{jmespath_identifier(name)}: {jmespath_identifier(name)}[*].{expression}")
        fields[name] = {"type": ["array", "null"], "items": item_schema}
    return "{" + ", ".join(parts) + "}", {"type": "object", "properties": fields}
