"""Refuse, before any handler runs, input that the layers below cannot take.

- NUL (U+0000) in a path parameter, the query string or any JSON string:
  PostgreSQL text and jsonb cannot hold it, so the query would fail halfway
  through the request.
- JSON nested deeper than ``MAX_JSON_DEPTH``: the decoder, the JSON Schema
  checker and the jsonb encoder all recurse, and Python's stack is the limit.

Both are ``400 validation_failed`` naming where the problem is. The body is
decoded here through ``request.json()``, which caches it, so the handler
does not decode it again.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl

from litestar import Request
from litestar.exceptions import SerializationException

from control_plane.errors import ValidationFailed
from shared.engine.spec_validation import FieldError

MAX_JSON_DEPTH = 64
_NUL = "\x00"
_WITH_BODY = frozenset({"POST", "PUT", "PATCH", "DELETE"})


def _nul_in_path(request: Request[Any, Any, Any]) -> FieldError | None:
    for name, value in request.path_params.items():
        if isinstance(value, str) and _NUL in value:
            return FieldError(name, "a NUL character is not allowed in a path parameter")
    if _NUL in request.scope["path"]:
        return FieldError("", "a NUL character is not allowed in the URL path")
    return None


def _nul_in_query(request: Request[Any, Any, Any]) -> FieldError | None:
    query = request.scope["query_string"].decode("latin-1")
    if "%00" not in query and _NUL not in query:
        return None
    for name, value in parse_qsl(query, keep_blank_values=True):
        if _NUL in name or _NUL in value:
            return FieldError(name.replace(_NUL, ""), "a NUL character is not allowed here")
    return None


def _child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def json_problem(document: Any) -> FieldError | None:
    """The first string holding a NUL, or the first place nested too deeply."""
    stack: list[tuple[Any, str, int]] = [(document, "", 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, str):
            if _NUL in node:
                return FieldError(path, "a NUL character is not allowed in a string")
            continue
        if not isinstance(node, dict | list):
            continue
        if depth >= MAX_JSON_DEPTH:
            return FieldError(path, f"nested more than {MAX_JSON_DEPTH} levels deep")
        if isinstance(node, dict):
            for key, value in node.items():
                if _NUL in key:
                    return FieldError(path, "a NUL character is not allowed in a key")
                stack.append((value, _child(path, key), depth + 1))
        else:
            stack.extend((value, _child(path, i), depth + 1) for i, value in enumerate(node))
    return None


async def check_request(request: Request[Any, Any, Any]) -> None:
    """Litestar ``before_request`` hook of the control plane."""
    problem = _nul_in_path(request) or _nul_in_query(request)
    if problem is None and request.method in _WITH_BODY and await request.body():
        try:
            document = await request.json()
        except RecursionError:
            problem = FieldError("", f"the JSON body is nested more than {MAX_JSON_DEPTH} deep")
        except SerializationException:
            return  # not JSON: the handler reports it as it always does
        else:
            problem = json_problem(document)
    if problem is not None:
        raise ValidationFailed([problem])
