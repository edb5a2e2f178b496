"""``--include`` / ``--exclude``: which operations of the document to import.

A filter is ``KIND:PATTERN`` with KIND ``tag``, ``path`` or ``operation``
(the operationId), or a bare PATTERN that matches any of the three.
PATTERN is a shell glob (``path:/pets/*``, ``tag:store``, ``operation:get*``);
tags compare case-insensitively, paths and operationIds exactly. With
includes, an operation must match one of them; then any matching exclude
leaves it out.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Literal

Kind = Literal["tag", "path", "operation", "any"]
_KINDS: dict[str, Kind] = {
    "tag": "tag",
    "path": "path",
    "operation": "operation",
    "operationid": "operation",
    "op": "operation",
}


class FilterError(ValueError):
    """A malformed ``--include``/``--exclude`` filter; the import answers 400."""

    pass


@dataclass(frozen=True, slots=True)
class Filter:
    kind: Kind
    pattern: str

    def matches(self, *, tags: list[str], path: str, operation_id: str | None) -> bool:
        if self.kind in ("tag", "any") and any(
            fnmatchcase(t.lower(), self.pattern.lower()) for t in tags
        ):
            return True
        if self.kind in ("path", "any") and fnmatchcase(path, self.pattern):
            return True
        return (
            self.kind in ("operation", "any")
            and operation_id is not None
            and fnmatchcase(operation_id, self.pattern)
        )


def parse_filter(text: str) -> Filter:
    kind, sep, pattern = text.partition(":")
    if sep and not kind.startswith("/"):
        known = _KINDS.get(kind.strip().lower())
        if known is None:
            raise FilterError(f"filter {text!r}: kind must be tag, path or operation")
        if not pattern.strip():
            raise FilterError(f"filter {text!r} has no pattern")
        return Filter(known, pattern.strip())
    if not text.strip():
        raise FilterError("an empty filter")
    return Filter("any", text.strip())


@dataclass(frozen=True, slots=True)
class Selection:
    """The parsed filters; ``wants`` says whether one operation is imported."""

    include: tuple[Filter, ...] = ()
    exclude: tuple[Filter, ...] = ()

    @classmethod
    def parse(cls, include: list[str], exclude: list[str]) -> Selection:
        return cls(tuple(map(parse_filter, include)), tuple(map(parse_filter, exclude)))

    def wants(self, *, tags: list[str], path: str, operation_id: str | None) -> bool:
        if self.include and not any(
            f.matches(tags=tags, path=path, operation_id=operation_id) for f in self.include
        ):
            return False
        return not any(
            f.matches(tags=tags, path=path, operation_id=operation_id) for f in self.exclude
        )
