"""Tool and argument names from OpenAPI names.

Tool names: the operationId in snake_case (``getPetById`` → ``get_pet_by_id``,
``repos/get-content`` → ``repos_get_content``), or without one the method and
path (``GET /pets/{petId}`` → ``get_pets_by_pet_id``); an optional prefix in
front. At most 64 characters (docs/architecture.md, "Tool names"): a longer name keeps its
start and ends in an 8-character hash of the whole name, so two long names
that share a start stay distinct and a re-import names them the same way.
Names already taken in this import get ``_2``, ``_3`` ... in document order.

Argument names: the parameter's own name when it is an identifier
(``[A-Za-z_][A-Za-z0-9_]*``, what path variables and bare JMESPath fields
need), else its snake_case form (``filter[name]`` → ``filter_name``).
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

MAX_NAME = 64
_CAMEL_LOWER_UPPER = re.compile(r"([a-z0-9])([A-Z])")
_CAMEL_ACRONYM = re.compile(r"([A-Z]+)([A-Z][a-z])")
_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]+")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
_PATH_PARAMETER = re.compile(r"^\{([^{}]+)\}$")


def snake_case(text: str) -> str:
    """ASCII snake_case; empty when nothing usable is left."""
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    text = _CAMEL_ACRONYM.sub(r"\1_\2", text)
    text = _CAMEL_LOWER_UPPER.sub(r"\1_\2", text)
    return _NOT_ALNUM.sub("_", text).strip("_").lower()


def _fit(name: str, limit: int = MAX_NAME) -> str:
    if len(name) <= limit:
        return name
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    head = name[: limit - len(digest) - 1].rstrip("_")
    return f"{head}_{digest}"


def name_from_path(method: str, path: str) -> str:
    words = [method.lower()]
    for segment in path.split("/"):
        match = _PATH_PARAMETER.match(segment)
        if match:
            words.append("by_" + (snake_case(match.group(1)) or "id"))
        elif segment:
            words.append(snake_case(segment))
    return "_".join(w for w in words if w)


class ToolNamer:
    """Unique tool names within one import."""

    def __init__(self, prefix: str = "") -> None:
        self._prefix = snake_case(prefix) if prefix else ""
        self._taken: set[str] = set()

    def name(self, operation_id: str | None, method: str, path: str) -> str:
        base = snake_case(operation_id) if operation_id else ""
        base = base or name_from_path(method, path)
        if base[0].isdigit():
            base = f"op_{base}"
        if self._prefix:
            base = f"{self._prefix}_{base}"
        candidate = _fit(base)
        suffix = 1
        while candidate in self._taken:
            suffix += 1
            tail = f"_{suffix}"
            candidate = _fit(base, MAX_NAME - len(tail)) + tail
        self._taken.add(candidate)
        return candidate


def argument_name(name: str) -> str:
    """An identifier for ``name``: itself when it is one, else its snake_case form."""
    if _IDENTIFIER.fullmatch(name):
        return name
    candidate = _fit(snake_case(name) or "value", 60)
    return f"p_{candidate}" if candidate[0].isdigit() else candidate


class ArgumentNamer:
    """Unique argument names within one operation; the first claim keeps the plain name."""

    def __init__(self, reserved: set[str] | None = None) -> None:
        self._taken: set[str] = set(reserved or ())

    def claim(self, name: str, location: str) -> str:
        candidate = argument_name(name)
        if candidate not in self._taken:
            self._taken.add(candidate)
            return candidate
        base = argument_name(f"{location}_{candidate}")
        candidate, suffix = base, 1
        while candidate in self._taken:
            suffix += 1
            candidate = f"{base[:58]}_{suffix}"
        self._taken.add(candidate)
        return candidate
