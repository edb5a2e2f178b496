"""How much of a call's arguments the validator walks, at most.

The request body is capped (``CRANK_MAX_BODY_BYTES``, 1 MiB by default),
but a megabyte of JSON is half a million array elements, and jsonschema
spends microseconds on each: seconds of one shared event loop. So before any
schema keyword runs, the arguments are measured: more than
``MAX_ARGUMENT_NODES`` values in all, or containers nested deeper than
``MAX_ARGUMENT_DEPTH``, is ``invalid_arguments`` naming the container that
crossed the limit (docs/architecture.md, "Schema patterns"). The measure
reads each container's length, so a huge array is refused without walking it.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["MAX_ARGUMENT_DEPTH", "MAX_ARGUMENT_NODES", "child_path", "oversized"]

MAX_ARGUMENT_NODES = 10_000
MAX_ARGUMENT_DEPTH = 64
# A key jsonschema's json_path writes after a dot; it quotes any other, and so does child_path.
_PLAIN_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


def child_path(path: str, key: str | int) -> str:
    """The JSON path of ``key`` under ``path``: ``$.a``, ``$['a b']``, ``$.a[3]``; under
    the root ``""``, ``a``. Keys are written as jsonschema's ``json_path`` writes them
    (an argument's path names it the same way in every error); a character that does not
    print is escaped as in a Python literal, so a path never carries a NUL."""
    if isinstance(key, int):
        return f"{path}[{key}]"
    if _PLAIN_KEY.fullmatch(key):
        return f"{path}.{key}" if path else key
    quoted = repr(key)
    if quoted[0] == '"':  # repr's choice for a key with ' and no ": jsonschema escapes the '
        quoted = "'" + quoted[1:-1].replace("'", "\\'") + "'"
    return f"{path}[{quoted}]"


def oversized(arguments: dict[str, Any]) -> tuple[str, str, str] | None:
    """(field, rule, explanation) where ``arguments`` exceed a limit, or None."""
    count = 0
    stack: list[tuple[dict[str, Any] | list[Any], str, int]] = [(arguments, "$", 1)]
    while stack:
        container, path, depth = stack.pop()
        if depth > MAX_ARGUMENT_DEPTH:
            return path, "maxDepth", f"is nested deeper than {MAX_ARGUMENT_DEPTH} levels"
        count += len(container)
        if count > MAX_ARGUMENT_NODES:
            return (
                path,
                "maxNodes",
                f"the arguments hold more than {MAX_ARGUMENT_NODES} values in all; "
                "send fewer at a time",
            )
        items = container.items() if isinstance(container, dict) else enumerate(container)
        for key, value in items:
            if isinstance(value, dict | list) and value:
                stack.append((value, child_path(path, key), depth + 1))
    return None
