"""An operation as the console shows it: the state in words, the draft made readable,
the diff's values as text. Shaping only: the data comes from
``control_plane.services.operations``."""

from __future__ import annotations

import json
from typing import Any, Final

import msgspec

from control_plane.services.operations import DRAFT, Change, ListState, SpecRef
from shared.engine.spec import OperationSpec, operation_from_builtins

STATE_FILTERS: Final[dict[ListState, str]] = {
    "draft": "Draft only",
    "published": "Published",
    "ahead": "Draft ahead of published",
}


def state_filter(text: str) -> ListState | None:
    """The list's ``state`` filter as the select sends it; None for anything else."""
    for state in STATE_FILTERS:
        if text == state:
            return state
    return None


def state_label(latest_version: int | None, draft_changed: bool) -> str:
    """The state in words: draft only, published vN or draft ahead of vN."""
    if latest_version is None:
        return "draft only"
    if draft_changed:
        return f"draft ahead of v{latest_version}"
    return f"published v{latest_version}"


def state_kind(latest_version: int | None, draft_changed: bool) -> str:
    """The badge class of a state: ``ok`` when what is served is what is edited."""
    if latest_version is None:
        return "draft"
    return "warning" if draft_changed else "ok"


class Parameter(msgspec.Struct, kw_only=True):
    name: str
    type: str
    required: bool
    description: str
    allowed: str  # the enum's values, comma-separated; "" when any value goes


def parameters(spec: OperationSpec) -> list[Parameter]:
    """The input schema's top-level properties, in the schema's order."""
    properties = spec.input.get("properties")
    if not isinstance(properties, dict):
        return []
    required = spec.input.get("required")
    required_names = set(required) if isinstance(required, list) else set()
    found = []
    for name, schema in properties.items():
        schema = schema if isinstance(schema, dict) else {}
        kind = schema.get("type", "")
        enum = schema.get("enum")
        found.append(
            Parameter(
                name=name,
                type="/".join(kind) if isinstance(kind, list) else str(kind),
                required=name in required_names,
                description=str(schema.get("description", "")),
                allowed=", ".join(json.dumps(v) for v in enum) if isinstance(enum, list) else "",
            )
        )
    return found


def readable_spec(draft: dict[str, Any]) -> OperationSpec | None:
    """The stored draft as a spec; None for one stored before a format change."""
    try:
        return operation_from_builtins(draft)
    except msgspec.ValidationError:
        return None


def as_text(value: Any) -> str:
    """A JSON value as the diff shows it: scalars inline, objects and arrays indented."""
    if value is None:
        return ""
    if isinstance(value, dict | list):
        return json.dumps(value, indent=2, ensure_ascii=False)
    return json.dumps(value, ensure_ascii=False)


class DiffRow(msgspec.Struct, kw_only=True):
    path: str
    kind: str
    before: str
    after: str


def diff_rows(changes: list[Change]) -> list[DiffRow]:
    return [
        DiffRow(
            path=change.path or "(the whole spec)",
            kind=change.kind,
            before=as_text(change.before),
            after=as_text(change.after),
        )
        for change in changes
    ]


def ref_label(ref: SpecRef) -> str:
    return "the draft" if ref == DRAFT else f"version {ref}"
