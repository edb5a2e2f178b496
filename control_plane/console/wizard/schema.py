"""The wizard's parameters step: rows of a form and the operation's input JSON Schema.

A row says what most tool parameters need (name, type, required, description,
enum, pattern, min/max). Everything a row cannot say (a property with other
keywords, root keywords besides ``type``, ``properties`` and ``required``) is
kept in the "advanced" JSON object, which is merged back over the rows, so an
operation written by hand survives a round trip through the wizard unchanged.
The schema itself is judged by the operations service when the draft is saved.
"""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass, field
from typing import Any, Final

from shared.engine.spec_validation import path_variables

TYPES: Final = ("string", "integer", "number", "boolean", "array", "object")
# Per type, the JSON Schema keywords behind the row's "min" and "max" fields.
_BOUNDS: Final = {
    "string": ("minLength", "maxLength"),
    "integer": ("minimum", "maximum"),
    "number": ("minimum", "maximum"),
    "array": ("minItems", "maxItems"),
}
_ROW_KEYWORDS: Final = {"type", "description", "enum", "pattern"}
_KEY: Final = re.compile(r"r[0-9a-f]{1,16}")
_VARIABLE: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")  # as the URL check takes them
MAX_ROWS: Final = 100
PARAM_FIELDS: Final = ("name", "type", "description", "enum", "pattern", "min", "max")


@dataclass
class ParamRow:
    """One parameter as the form shows it; every value is the text of its field."""

    key: str  # names the row's fields in the form: "<key>.name", "<key>.type", ...
    name: str = ""
    type: str = "string"
    required: bool = False
    description: str = ""
    enum: str = ""  # comma-separated
    pattern: str = ""
    min: str = ""
    max: str = ""
    errors: dict[str, str] = field(default_factory=dict)  # row field -> message


def new_key() -> str:
    return "r" + secrets.token_hex(4)


def _bound_keywords(kind: str) -> tuple[str, str] | None:
    return _BOUNDS.get(kind)


def _expressible(declaration: Any) -> bool:
    """Whether a row can show this property without losing anything."""
    if not isinstance(declaration, dict) or declaration.get("type") not in TYPES:
        return False
    kind = declaration["type"]
    allowed = set(_ROW_KEYWORDS) | set(_bound_keywords(kind) or ())
    if not set(declaration) <= allowed:
        return False
    enum = declaration.get("enum")
    if enum is not None and not (
        isinstance(enum, list) and all(_enum_text_ok(value, kind) for value in enum)
    ):
        return False
    return all(isinstance(declaration.get(k, ""), str) for k in ("description", "pattern"))


def _enum_text_ok(value: Any, kind: str) -> bool:
    if kind == "string":
        return isinstance(value, str) and "," not in value and value == value.strip()
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return False


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def rows_from_schema(schema: dict[str, Any]) -> tuple[list[ParamRow], dict[str, Any]]:
    """The rows a stored input schema shows as, and what is left for the advanced field."""
    extra = {k: v for k, v in schema.items() if k not in ("type", "properties", "required")}
    properties = schema.get("properties")
    required = schema.get("required")
    required_names = set(required) if isinstance(required, list) else set()
    rows: list[ParamRow] = []
    leftover: dict[str, Any] = {}
    for name, declaration in (properties if isinstance(properties, dict) else {}).items():
        if not _expressible(declaration):
            leftover[name] = declaration
            continue
        kind = declaration["type"]
        bounds = _bound_keywords(kind) or ("", "")
        rows.append(
            ParamRow(
                key=new_key(),
                name=name,
                type=kind,
                required=name in required_names,
                description=declaration.get("description", ""),
                enum=", ".join(_text(v) for v in declaration.get("enum", [])),
                pattern=declaration.get("pattern", ""),
                min=_text(declaration.get(bounds[0])),
                max=_text(declaration.get(bounds[1])),
            )
        )
    if leftover:
        extra["properties"] = leftover
    leftover_required = [n for n in required or [] if n in leftover] if required else []
    if leftover_required:
        extra["required"] = leftover_required
    return rows, extra


def rows_from_form(form: Any) -> list[ParamRow]:
    """The rows a posted parameters form holds, in order (``row`` lists their keys)."""
    rows: list[ParamRow] = []
    for key in form.getall("row", [])[:MAX_ROWS]:
        if not isinstance(key, str) or not _KEY.fullmatch(key):
            continue
        value = {name: str(form.get(f"{key}.{name}", "")).strip() for name in PARAM_FIELDS}
        rows.append(
            ParamRow(
                key=key,
                required=form.get(f"{key}.required") == "on",
                name=value["name"],
                type=value["type"],
                description=value["description"],
                enum=value["enum"],
                pattern=value["pattern"],
                min=value["min"],
                max=value["max"],
            )
        )
    return rows


def _number(text: str, integer: bool) -> int | float:
    """The number a field holds; ValueError when it holds none."""
    value = float(text) if not integer else int(text)
    if isinstance(value, float) and value.is_integer() and "." not in text and "e" not in text:
        return int(value)
    return value


def _declaration(row: ParamRow) -> dict[str, Any]:
    """The property a row declares; problems go to ``row.errors``."""
    declaration: dict[str, Any] = {"type": row.type}
    if row.description:
        declaration["description"] = row.description
    if row.enum:
        words = [word.strip() for word in row.enum.split(",") if word.strip()]
        if row.type == "string":
            declaration["enum"] = words
        elif row.type in ("integer", "number"):
            try:
                declaration["enum"] = [_number(word, row.type == "integer") for word in words]
            except ValueError:
                row.errors["enum"] = f"enum values of a {row.type} parameter are {row.type}s"
        else:
            row.errors["enum"] = "enum values are for string, integer and number parameters"
    if row.pattern:
        if row.type == "string":
            declaration["pattern"] = row.pattern
        else:
            row.errors["pattern"] = "a pattern is for string parameters"
    bounds = _bound_keywords(row.type)
    for which, text in (("min", row.min), ("max", row.max)):
        if not text:
            continue
        if bounds is None:
            row.errors[which] = f"a {row.type} parameter has no {which}imum"
            continue
        integer = row.type != "number"
        try:
            value = _number(text, integer)
        except ValueError:
            row.errors[which] = "a whole number" if integer else "a number"
            continue
        if integer and value < 0:
            row.errors[which] = "at least 0"
            continue
        declaration[bounds[0] if which == "min" else bounds[1]] = value
    return declaration


def _check_row(row: ParamRow, seen: set[str]) -> None:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_.-]{0,63}", row.name):
        row.errors["name"] = "1-64 letters, digits, _, . and -, starting with a letter or _"
    elif row.name in seen:
        row.errors["name"] = f"{row.name!r} is named twice"
    seen.add(row.name)
    if row.type not in TYPES:
        row.errors["type"] = "choose one of " + ", ".join(TYPES)
        row.type = "string"


def parse_extra(text: str) -> tuple[dict[str, Any], str | None]:
    """The advanced JSON object; its error message when it is not one."""
    if not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except ValueError as exc:
        return {}, f"not JSON: {exc}"
    if not isinstance(value, dict):
        return {}, 'a JSON object of schema keywords, e.g. {"additionalProperties": false}'
    return value, None


def schema_from_rows(rows: list[ParamRow], extra: dict[str, Any]) -> dict[str, Any]:
    """The input schema of ``rows`` with ``extra`` merged over it; row problems are
    left in each row's ``errors`` (check them before saving)."""
    properties: dict[str, Any] = {}
    required: list[str] = []
    seen: set[str] = set()
    for row in rows:
        _check_row(row, seen)
        properties[row.name] = _declaration(row)
        if row.required:
            required.append(row.name)
    extra_properties = extra.get("properties")
    if isinstance(extra_properties, dict):
        properties.update(extra_properties)
    extra_required = extra.get("required")
    if isinstance(extra_required, list):
        required += [name for name in extra_required if name not in required]
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema.update({k: v for k, v in extra.items() if k not in ("properties", "required")})
    return schema


def with_path_variables(schema: dict[str, Any], url: str) -> tuple[dict[str, Any], list[str]]:
    """``schema`` with every path variable of ``url`` declared and required (a string
    unless declared already), and the names that were added."""
    properties = dict(schema.get("properties") or {})
    required = list(schema.get("required") or [])
    added: list[str] = []
    try:
        names = path_variables(url)
    except ValueError:  # not a URL: saving it says so at the URL field
        names = []
    for name in (n for n in names if _VARIABLE.fullmatch(n)):
        if name not in properties:
            properties[name] = {"type": "string", "description": f"The {name} in the URL path."}
            added.append(name)
        if name not in required:
            required.append(name)
    return {**schema, "type": "object", "properties": properties, "required": required}, added
