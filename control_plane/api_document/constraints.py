"""The constraints the validators enforce, written into the document where the
fields are described (docs/architecture.md, "The API document").

The operation-file types are checked by ``shared.engine.spec_validation``
after decoding (every error of a file at once, with its path), not by msgspec,
so their schemas would otherwise say ``string`` where only a tool name is
taken. :class:`ValidatorConstraints` is an OpenAPI schema plugin: it lets
Litestar build a struct's schema as usual, then adds the patterns, bounds and
enums from the very constants the validators use, and says where unknown
fields are refused. Path parameters carry theirs
through the ``*Path`` aliases below; documenting a constraint never enforces
it a second time.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec
from litestar._openapi.schema_generation import SchemaCreator

# Litestar's own struct plugin, extended: it is not re-exported publicly.
from litestar._openapi.schema_generation.plugins.struct import StructSchemaPlugin
from litestar.openapi.spec import OpenAPIType, Reference, Schema
from litestar.params import PathParameter
from litestar.typing import FieldDefinition

from shared.engine.answer_limits import MAX_RAW_BYTES
from shared.engine.spec import (
    WEBHOOK_EVENTS,
    WEBHOOK_FORMATS,
    AgentSpec,
    AuthSpec,
    ExecutionConfig,
    FileAgentSpec,
    OperationSpec,
    RateLimit,
    ResponseSpec,
    SecretRef,
    WebhookSpec,
)
from shared.engine.spec_validation import (
    MAX_APPROVAL_WAIT_S,
    MAX_BYTES,
    MAX_ITEMS,
    MAX_RETRIES,
    MAX_TIMEOUT_MS,
    MAX_WEBHOOK_URL_CHARS,
    SECRET_NAME,
    SLUG,
    TOOL_NAME,
)


def anchored(pattern: re.Pattern[str]) -> str:
    """A validator's ``fullmatch`` pattern as an OpenAPI ``pattern`` (which searches)."""
    return f"^(?:{pattern.pattern})$"


Extra = dict[str, Any]
_SLUG: Extra = {"pattern": anchored(SLUG)}
_TOOL: Extra = {"pattern": anchored(TOOL_NAME)}
_SECRET: Extra = {"pattern": anchored(SECRET_NAME)}


def _between(low: int, high: int) -> Extra:
    return {"minimum": low, "maximum": high}


def _items(extra: Extra) -> Extra:
    return {"items": extra}


_AGENT: dict[str, Extra] = {
    "slug": _SLUG,
    "operations": _items(_TOOL),
    "approval_wait_s": _between(0, MAX_APPROVAL_WAIT_S),
}

# Type -> property -> what its schema gains: the validators' own constants.
CONSTRAINTS: dict[type[msgspec.Struct], dict[str, Extra]] = {
    OperationSpec: {"name": _TOOL, "description": {"min_length": 1}},
    AgentSpec: _AGENT,
    FileAgentSpec: _AGENT,
    RateLimit: {"requests": {"minimum": 1}, "per_seconds": {"minimum": 1}},
    ResponseSpec: {
        "max_items": _between(1, MAX_ITEMS),
        "max_bytes": _between(256, MAX_BYTES),
        "max_raw_bytes": _between(1024, MAX_RAW_BYTES),
    },
    ExecutionConfig: {
        "timeout_ms": _between(100, MAX_TIMEOUT_MS),
        "retries": _between(0, MAX_RETRIES),
    },
    AuthSpec: {"secret": _SECRET},
    SecretRef: {"secret": _SECRET},
    WebhookSpec: {
        "url": {"max_length": MAX_WEBHOOK_URL_CHARS},
        "events": _items({"enum": list(WEBHOOK_EVENTS)}),
        "format": {"enum": list(WEBHOOK_FORMATS)},
    },
}


def constrain(type_: type[msgspec.Struct], properties: dict[str, Extra]) -> None:
    """Add constraints for a type defined outside the shared operation-file types
    (an admin API body of the control plane's own)."""
    CONSTRAINTS[type_] = properties


def _apply(schema: Schema | Reference, extra: Extra) -> None:
    """Set ``extra`` on the schema, or on the non-null member of an optional's ``oneOf``."""
    if isinstance(schema, Reference):
        raise TypeError("constraints are for scalar and array properties")
    if schema.one_of:
        for member in schema.one_of:
            if isinstance(member, Schema) and member.type != OpenAPIType.NULL:
                _apply(member, extra)
        return
    for key, value in extra.items():
        if key == "items":
            assert schema.items is not None, "items constraints on a property without items"
            _apply(schema.items, value)
        else:
            setattr(schema, key, value)


class ValidatorConstraints(StructSchemaPlugin):
    """Builds a struct's schema as Litestar does, then adds its constraints from
    ``CONSTRAINTS``, and ``additionalProperties: false`` where msgspec refuses
    unknown fields (``forbid_unknown_fields``, every body of Crank's own)."""

    def to_openapi_schema(
        self, field_definition: FieldDefinition, schema_creator: SchemaCreator
    ) -> Schema:
        schema = super().to_openapi_schema(field_definition, schema_creator)
        struct_type = field_definition.type_
        properties = schema.properties or {}
        for name, extra in CONSTRAINTS.get(struct_type, {}).items():
            if name not in properties:
                raise KeyError(f"{struct_type.__name__} has no field {name!r}")
            _apply(properties[name], extra)
        if struct_type.__struct_config__.forbid_unknown_fields:
            schema.additional_properties = False
        return schema


def _path(description: str, extra: Extra) -> Any:
    # schema_extra documents the pattern; the handler's own check still decides (404, 400).
    return PathParameter(description=description, schema_extra=extra)


WORKSPACE_SLUG = anchored(SLUG)  # the path's {workspace}, which no handler takes itself
AGENT_SLUG: Extra = _SLUG
OperationNamePath = Annotated[str, _path("the operation's name (a tool name)", _TOOL)]
AgentSlugPath = Annotated[str, _path("the agent's slug", _SLUG)]
SecretNamePath = Annotated[str, _path("the secret's name", _SECRET)]
ProviderNamePath = Annotated[str, _path("the identity provider's name", _SLUG)]
VersionPath = Annotated[int, _path("a published version number", {"minimum": 1})]
