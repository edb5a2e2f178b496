"""An operation's published version as an MCP Tool definition, for both protocol eras:
what the gateway lists in tools/list, and what the console's wizard shows on its
review step before a publish (what the model will see).

Annotations follow from the method and the safety settings; the input schema
gains ``_crank_confirmation_token`` where a confirmation is required, so that
clients validating arguments keep it; ``outputSchema`` describes the selected
success result only (docs/architecture.md, "Schemas").
"""

from __future__ import annotations

from typing import Any

from shared.engine.request_builder import CONFIRMATION_ARGUMENT, CONFIRMATION_TOKEN_PATTERN
from shared.engine.spec import OperationSpec

_CONFIRMATION_PROPERTY = {
    "type": "string",
    "pattern": CONFIRMATION_TOKEN_PATTERN,
    "description": (
        "Leave out on the first call. Crank answers confirmation_required with a token; "
        "repeat the same call with the same arguments plus this token to execute."
    ),
}


def input_schema(spec: OperationSpec) -> dict[str, Any]:
    schema = dict(spec.input)
    if spec.confirmation_required():
        properties = dict(schema.get("properties") or {})
        properties[CONFIRMATION_ARGUMENT] = _CONFIRMATION_PROPERTY
        schema["properties"] = properties
    return schema


def output_schema(spec: OperationSpec, *, wrap_arrays: bool) -> dict[str, Any] | None:
    """The schema every successful structuredContent matches, or None when unknown.

    Operations that need approval answer their first call with the approval
    structure, so they publish none. MCP 2025 requires an object at the root:
    an array result travels as ``{"items": [...]}`` there.
    """
    schema = spec.response.output_schema
    if schema is None or spec.safety.approval:
        return None
    if schema.get("type") == "object":
        return schema
    if not wrap_arrays:
        return schema
    if schema.get("type") == "array":
        return {"type": "object", "properties": {"items": schema}, "required": ["items"]}
    return None  # a scalar or untyped result: no schema can promise its shape


def tool_annotations(spec: OperationSpec) -> dict[str, Any]:
    method = spec.request.method
    read_only = method == "GET"
    result: dict[str, Any] = {
        "readOnlyHint": read_only,
        "openWorldHint": True,  # every tool reaches an external API
    }
    if not read_only:
        # A confirmation gate marks an operation its author considers destructive.
        result["destructiveHint"] = (
            method in ("DELETE", "PUT", "PATCH") or spec.confirmation_required()
        )
        result["idempotentHint"] = (
            method in ("GET", "PUT", "DELETE") or spec.execution_config.idempotency is not None
        )
    if spec.title:
        result["title"] = spec.title
    return result


def _definition(spec: OperationSpec, *, wrap_arrays: bool) -> dict[str, Any]:
    tool: dict[str, Any] = {"name": spec.name}
    if spec.title:
        tool["title"] = spec.title
    tool["description"] = spec.description
    tool["inputSchema"] = input_schema(spec)
    schema = output_schema(spec, wrap_arrays=wrap_arrays)
    if schema is not None:
        tool["outputSchema"] = schema
    tool["annotations"] = tool_annotations(spec)
    return tool


def tool_definitions(spec: OperationSpec) -> tuple[dict[str, Any], dict[str, Any]]:
    """The MCP Tool as the 2025 revisions list it (array results wrapped: their results
    must be objects) and as 2026-07-28 lists it."""
    return _definition(spec, wrap_arrays=True), _definition(spec, wrap_arrays=False)
