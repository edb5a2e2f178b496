"""A "did you mean" for msgspec's unknown-field errors: ``descripton`` gets ``description``.

msgspec refuses an unknown field (every Struct of the operation file forbids
them) with ``Object contains unknown field `descripton``` and the path of the
object. The close names are the fields of the Struct at that path, found by
walking the decoded type (``msgspec.inspect``), so the suggestion is always a
field that is allowed there.
"""

from __future__ import annotations

import difflib
import re
from typing import Any, Final

import msgspec.inspect as mi

_UNKNOWN: Final = re.compile(r"Object contains unknown field `(.+)`")
_STEP: Final = re.compile(r"(?:^|\.)([^.\[]+)|\[([^\]]*)\]")


def _unwrap(info: mi.Type, step_is_index: bool = False) -> mi.Type:
    """The member of an Optional or a union that the next step of a path can go into
    (an index: a list; a name or the end: a Struct or a dict)."""
    while isinstance(info, mi.Metadata):
        info = info.type
    if not isinstance(info, mi.UnionType):
        return info
    members = [_unwrap(member) for member in info.types]
    wanted = (
        (mi.ListType, mi.VarTupleType, mi.SetType)
        if step_is_index
        else (mi.StructType, mi.DictType)
    )
    for member in members:
        if isinstance(member, wanted):
            return member
    return info


def field_names(root: Any, path: str) -> list[str]:
    """The field names of the Struct at ``path`` (``operations[0].request``) of type
    ``root``; empty when the path leads to no Struct."""
    info: mi.Type = mi.type_info(root)
    for name, _index in _STEP.findall(path):
        info = _unwrap(info, step_is_index=not name)
        if name and isinstance(info, mi.StructType):
            fields = {field.encode_name: field.type for field in info.fields}
            if name not in fields:
                return []
            info = fields[name]
        elif isinstance(info, mi.DictType):
            info = info.value_type
        elif not name and isinstance(info, mi.ListType | mi.VarTupleType | mi.SetType):
            info = info.item_type
        else:
            return []
    info = _unwrap(info)
    if isinstance(info, mi.StructType):
        return [field.encode_name for field in info.fields]
    return []


def with_suggestion(message: str, path: str, root: Any) -> str:
    """``message``, plus ``; did you mean `description`?`` when it is msgspec's
    unknown-field error at ``path`` of type ``root`` and an allowed field is close."""
    match = _UNKNOWN.fullmatch(message)
    if match is None:
        return message
    close = difflib.get_close_matches(match.group(1), field_names(root, path), n=1)
    return f"{message}; did you mean `{close[0]}`?" if close else message
