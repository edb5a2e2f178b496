"""Input the layers below cannot take, refused with ``400 validation_failed``
naming where the problem is (docs/architecture.md, "Request admission").

- NUL (U+0000) in a path parameter, the query string or any JSON string:
  PostgreSQL text and jsonb cannot hold it, so the query would fail halfway
  through the request.
- JSON nested deeper than ``MAX_JSON_DEPTH``: the decoder, the JSON Schema
  checker and the jsonb encoder all recurse, and Python's stack is the limit.
- JSON holding more than ``MAX_JSON_VALUES`` values: every later walk (the
  schema checker, the linter, the jsonb encoder) is as long as the document.

These run only for a caller already admitted (``control_plane.admission``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from urllib.parse import parse_qsl

from litestar import Request

from shared.engine.spec_validation import FieldError

MAX_JSON_DEPTH = 64
MAX_JSON_VALUES = 1_000_000
_NUL = "\x00"


def nul_in_path(request: Request[Any, Any, Any]) -> FieldError | None:
    for name, value in request.path_params.items():
        if isinstance(value, str) and _NUL in value:
            return FieldError(name, "a NUL character is not allowed in a path parameter")
    if _NUL in request.scope["path"]:
        return FieldError("", "a NUL character is not allowed in the URL path")
    return None


def nul_in_query(request: Request[Any, Any, Any]) -> FieldError | None:
    query = request.scope["query_string"].decode("latin-1")
    if "%00" not in query and _NUL not in query:
        return None
    for name, value in parse_qsl(query, keep_blank_values=True):
        if _NUL in name or _NUL in value:
            return FieldError(name.replace(_NUL, ""), "a NUL character is not allowed here")
    return None


def _path(keys: list[str | int]) -> str:
    """``a.b[0].c`` for the keys from the root."""
    path = ""
    for key in keys:
        if isinstance(key, int):
            path += f"[{key}]"
        else:
            path = f"{path}.{key}" if path else key
    return path


def _children(node: dict[str, Any] | list[Any]) -> Iterator[tuple[str | int, Any]]:
    return iter(node.items()) if isinstance(node, dict) else enumerate(node)


def json_problem(document: Any) -> FieldError | None:
    """The first string holding a NUL, the first place nested too deeply, or too many values.

    Depth first, holding one iterator per open container and the keys that lead
    to it: memory grows with the depth (at most ``MAX_JSON_DEPTH``), never with
    the width, and the walk stops after ``MAX_JSON_VALUES`` values."""
    if isinstance(document, str):
        return (
            FieldError("", "a NUL character is not allowed in a string")
            if _NUL in document
            else None
        )
    if not isinstance(document, dict | list):
        return None
    open_containers = [_children(document)]
    keys: list[str | int] = []  # the key of every open container but the root
    values = 1
    while open_containers:
        child = next(open_containers[-1], None)
        if child is None:
            open_containers.pop()
            if keys:
                keys.pop()
            continue
        key, node = child
        values += 1
        if values > MAX_JSON_VALUES:
            return FieldError("", f"the JSON body holds more than {MAX_JSON_VALUES} values")
        if isinstance(key, str) and _NUL in key:
            return FieldError(_path(keys), "a NUL character is not allowed in a key")
        if isinstance(node, str):
            if _NUL in node:
                return FieldError(_path([*keys, key]), "a NUL character is not allowed in a string")
        elif isinstance(node, dict | list):
            if len(open_containers) >= MAX_JSON_DEPTH:
                return FieldError(
                    _path([*keys, key]), f"nested more than {MAX_JSON_DEPTH} levels deep"
                )
            keys.append(key)
            open_containers.append(_children(node))
    return None
