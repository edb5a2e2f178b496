"""Parameters and request body → the tool's arguments and the request mapping.

Arguments are claimed in this order, so the plainest names go to what the
model needs most: path parameters, query parameters, the idempotency header,
then body properties. A name already taken is prefixed with its location
(``query_id``, ``body_name``); names that are no identifiers are snake_cased.

- **path**: a required string/integer/number argument, the URL template
  rewritten to the argument's name (``{pet-id}`` → ``{pet_id}``).
- **query**: ``request.query`` maps the parameter name to its argument.
  Arrays repeat the parameter (``explode``, Swagger ``multi``) or are joined
  with the style's separator (``explode: false``, ``collectionFormat``);
  objects go as JSON only when the parameter declares JSON ``content``,
  other object styles (``deepObject``) cannot be built.
- **header/cookie**: Crank sends static headers only (docs/operation-file.md,
  ``request.headers``). An ``Idempotency-Key`` header becomes
  ``execution_config.idempotency``; a required header with one possible value
  (a single ``enum``, ``const`` or a ``default``) becomes a static header;
  ``Accept``, ``Content-Type`` and ``Authorization`` are ignored as OpenAPI
  says; any other optional one is dropped and noted; any other required one
  makes the operation impossible to call, so it is skipped.
- **body**: JSON only (``application/json`` and ``+json`` types). An object
  with properties is flattened into arguments; anything else is one argument
  (``body``, or the Swagger body parameter's / ``x-codegen-request-body-name``).
  The default mapping (every argument not in the path or query goes to the
  body under its own name) is used when it builds the same body; otherwise
  ``request.body`` is a JMESPath ``merge(...)`` that leaves out optional
  fields the model did not give (a bare multiselect would send them as null).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from control_plane.openapi_import.naming import ArgumentNamer
from control_plane.openapi_import.report import NoteCode
from control_plane.openapi_import.resolve import SchemaResolver
from control_plane.openapi_import.response import is_json_media, jmespath_identifier
from shared.engine.credentials import credential_name, credential_value
from shared.engine.request_builder import CONFIRMATION_ARGUMENT
from shared.engine.spec import IdempotencySpec

_PATH_TEMPLATE = re.compile(r"\{([^{}]+)\}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_IGNORED_HEADERS = frozenset({"accept", "content-type", "authorization"})
_IDEMPOTENCY_HEADERS = frozenset({"idempotency-key", "x-idempotency-key", "idempotency_key"})
_RESERVED_HEADERS = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "cookie", "proxy-authorization"}
)
_PATH_TYPES = ("string", "integer", "number")
_SEPARATORS = {
    "csv": ",",
    "ssv": " ",
    "tsv": "\t",
    "pipes": "|",
    "form": ",",
    "spaceDelimited": " ",
    "pipeDelimited": "|",
}
_SWAGGER_SCHEMA_KEYS = (
    "type",
    "format",
    "items",
    "enum",
    "default",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "uniqueItems",
    "multipleOf",
)
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})


class Unsupported(Exception):
    """The operation cannot be called through Crank; the message says why."""


@dataclass(slots=True)
class Parameter:
    """One parameter of an operation, from 2.0 or 3.x alike, before it becomes an argument."""

    name: str
    location: str  # path, query, header, cookie
    required: bool
    description: str | None
    schema: Any  # as written in the document (not yet converted)
    explode: bool = True
    separator: str = ","
    json_content: bool = False
    deprecated: bool = False


@dataclass(slots=True)
class Body:
    """An operation's request body; ``schema`` None when it is not JSON (it cannot be sent)."""

    schema: Any  # None: not JSON (``media`` says what it is)
    required: bool
    name: str = "body"
    media: tuple[str, ...] = ()


@dataclass(slots=True)
class RequestParts:
    path: str
    properties: dict[str, Any] = field(default_factory=dict)
    required: list[str] = field(default_factory=list)
    query: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    body: str | None = None
    idempotency: IdempotencySpec | None = None
    notes: list[tuple[NoteCode, str]] = field(default_factory=list)  # (code, message)

    def input_schema(self) -> dict[str, Any]:
        schema: dict[str, Any] = {"type": "object", "properties": self.properties}
        if self.required:
            schema["required"] = self.required
        schema["additionalProperties"] = False
        return schema


def parse_parameter(raw: dict[str, Any], *, swagger: bool) -> Parameter | None:
    """One parameter object (``$ref`` already followed); None for a body/formData one."""
    name, location = raw.get("name"), raw.get("in")
    if not isinstance(name, str) or not isinstance(location, str):
        return None
    if location in ("body", "formData"):
        return None
    description = raw.get("description") if isinstance(raw.get("description"), str) else None
    required = bool(raw.get("required")) or location == "path"
    deprecated = raw.get("deprecated") is True
    if swagger:
        fmt = raw.get("collectionFormat", "csv")
        return Parameter(
            name,
            location,
            required,
            description,
            {k: raw[k] for k in _SWAGGER_SCHEMA_KEYS if k in raw},
            explode=fmt == "multi",
            separator=_SEPARATORS.get(str(fmt), ","),
            deprecated=deprecated,
        )
    schema = raw.get("schema")
    json_content = False
    content = raw.get("content")
    if schema is None and isinstance(content, dict) and content:
        media, entry = next(iter(content.items()))
        schema = entry.get("schema") if isinstance(entry, dict) else None
        json_content = is_json_media(str(media))
    style = str(raw.get("style") or ("form" if location in ("query", "cookie") else "simple"))
    explode = raw.get("explode")
    if not isinstance(explode, bool):
        explode = style == "form"
    if style == "deepObject":
        explode = False
    return Parameter(
        name,
        location,
        required,
        description,
        schema if schema is not None else {},
        explode=explode,
        separator=_SEPARATORS.get(style, ","),
        json_content=json_content,
        deprecated=deprecated,
    )


def _types(schema: Any) -> list[str]:
    kind = schema.get("type") if isinstance(schema, dict) else None
    if isinstance(kind, str):
        return [kind]
    return [k for k in kind if isinstance(k, str)] if isinstance(kind, list) else []


def _described(schema: Any, parameter: Parameter) -> Any:
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    if parameter.description:
        out["description"] = parameter.description
    if parameter.deprecated:
        out["deprecated"] = True
    return out


def _path_schema(converted: Any, name: str) -> dict[str, Any]:
    """A path variable must be a string, integer or number (``shared.engine.spec_validation``)."""
    schema: dict[str, Any] = dict(converted) if isinstance(converted, dict) else {}
    kinds = [k for k in _types(schema) if k != "null"]
    scalar = [k for k in kinds if k in _PATH_TYPES]
    if scalar:
        schema["type"] = scalar[0]
    elif not kinds:
        values = schema.get("enum")
        numbers = (
            isinstance(values, list)
            and values
            and all(isinstance(v, int) and not isinstance(v, bool) for v in values)
        )
        schema["type"] = "integer" if numbers else "string"
    elif kinds == ["boolean"]:
        schema = {**schema, "type": "string", "enum": ["true", "false"]}
        schema.pop("default", None)
    else:
        raise Unsupported(f"path parameter {name!r} is a {kinds[0]}; only scalars fit a path")
    enum = schema.pop("enum", None)
    if isinstance(enum, list) and any(v is not None for v in enum):
        schema["enum"] = [v for v in enum if v is not None]  # a path value is never null
    return schema


def _single_value(schema: Any) -> str | None:
    if not isinstance(schema, dict):
        return None
    for value in (
        schema.get("const"),
        (schema.get("enum") or [None])[0] if len(schema.get("enum") or []) == 1 else None,
        schema.get("default"),
    ):
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            text = str(value)
            if text and not any(c in text for c in "\r\n\x00"):
                return text
    return None


class _Builder:
    def __init__(self, method: str, path: str, resolver: SchemaResolver) -> None:
        self.method = method
        self.resolver = resolver
        self.parts = RequestParts(path=path)
        self.names = ArgumentNamer({CONFIRMATION_ARGUMENT})
        self.renamed_body = False

    def note(self, code: NoteCode, message: str) -> None:
        if (code, message) not in self.parts.notes:
            self.parts.notes.append((code, message))

    def convert(self, schema: Any) -> Any:
        converted, notes = self.resolver.schema(schema, "request")
        for message in notes:
            self.note("schema_cut", message)
        return converted

    def claim(self, name: str, location: str) -> str:
        argument = self.names.claim(name, location)
        if argument != name:
            self.note("renamed", f"{location} parameter {name!r} is the argument {argument!r}")
        return argument

    def add(self, argument: str, schema: Any, *, required: bool) -> None:
        self.parts.properties[argument] = schema
        if required and argument not in self.parts.required:
            self.parts.required.append(argument)

    def path_parameters(self, parameters: list[Parameter]) -> None:
        declared = {p.name: p for p in parameters if p.location == "path"}
        for name in _PATH_TEMPLATE.findall(self.parts.path):
            parameter = declared.get(name)
            if parameter is None:
                self.note("renamed", f"path variable {name!r} is not declared; taken as a string")
                parameter = Parameter(name, "path", True, None, {"type": "string"})
            argument = self.claim(name, "path")
            schema = _path_schema(self.convert(parameter.schema), name)
            self.add(argument, _described(schema, parameter), required=True)
            self.parts.path = self.parts.path.replace(f"{{{name}}}", f"{{{argument}}}")

    def query_parameter(self, parameter: Parameter) -> None:
        schema = self.convert(parameter.schema)
        kinds = _types(schema)
        expression: str | None
        if "object" in kinds and not parameter.json_content:
            expression = None
        elif "array" in kinds and not parameter.json_content:
            items = schema.get("items") if isinstance(schema, dict) else None
            if isinstance(items, dict) and "object" in _types(items):
                expression = None
            elif parameter.explode:
                expression = ""
            else:
                expression = json.dumps(parameter.separator)
        else:
            expression = ""
        if expression is None:
            why = f"query parameter {parameter.name!r} is an object in a style Crank cannot build"
            if parameter.required:
                raise Unsupported(why)
            self.note("parameter_dropped", f"{why}; left out")
            return
        argument = self.claim(parameter.name, "query")
        self.add(argument, _described(schema, parameter), required=parameter.required)
        if expression:  # joined into one value: "a,b,c"
            expression = f"{argument} && join(`{expression}`, {argument}[*].to_string(@))"
        else:
            expression = argument
        self.parts.query[parameter.name] = expression

    def header_parameter(self, parameter: Parameter) -> None:
        lower = parameter.name.lower()
        kind = "cookie" if parameter.location == "cookie" else "header"
        if kind == "header" and lower in _IGNORED_HEADERS:
            return
        if kind == "header" and lower in _IDEMPOTENCY_HEADERS and self.parts.idempotency is None:
            argument = self.claim(parameter.name, "header")
            schema = self.convert(parameter.schema)
            if not isinstance(schema, dict) or _types(schema) not in ([], ["string"]):
                schema = {"type": "string"}
            schema = {**_described(schema, parameter), "type": "string", "minLength": 1}
            schema.setdefault(
                "description", "A unique key for this request; repeat it only to retry."
            )
            self.add(argument, schema, required=True)
            self.parts.idempotency = IdempotencySpec(argument=argument, header=parameter.name)
            self.note(
                "idempotency_configured",
                f"header {parameter.name} carries the idempotency key (argument {argument!r})",
            )
            return
        if kind == "header" and parameter.required and lower not in _RESERVED_HEADERS:
            value = _single_value(self.resolver.schema(parameter.schema, "request")[0])
            credential = credential_name(parameter.name) or (
                value is not None and credential_value(value) is not None
            )
            if credential:  # never a static header (shared.engine.credentials)
                self.note(
                    "parameter_dropped",
                    f"header {parameter.name} carries a credential: set it as a workspace secret "
                    f"and bind it with request.auth (type: header, name: {parameter.name})",
                )
                return
            if value is not None:
                self.parts.headers[parameter.name] = value
                self.note("static_header", f"header {parameter.name} is always sent as {value!r}")
                return
        why = f"{kind} parameter {parameter.name!r}: Crank sends static headers only"
        if parameter.required:
            raise Unsupported(f"required {why}")
        self.note("parameter_dropped", f"optional {why}; left out")

    def body(self, body: Body) -> None:
        if self.method not in _BODY_METHODS:
            if body.required:
                raise Unsupported(f"a {self.method} request with a body cannot be sent")
            self.note("body_dropped", f"the optional body of a {self.method} request is left out")
            return
        if body.schema is None:
            media = ", ".join(body.media) or "an unknown type"
            if body.required:
                raise Unsupported(f"the request body is {media}; Crank sends JSON bodies only")
            self.note("body_dropped", f"the optional request body ({media}) is left out")
            return
        schema = self.convert(body.schema)
        properties = schema.get("properties") if isinstance(schema, dict) else None
        flat = (
            isinstance(properties, dict)
            and bool(properties)
            and "object" in (_types(schema) or ["object"])
            and not any(k in schema for k in ("oneOf", "anyOf", "allOf", "not", "if"))
            and not isinstance(schema.get("additionalProperties"), dict)
        )
        if not flat:
            argument = self.claim(body.name, "body")
            self.add(argument, schema, required=body.required)
            self.parts.body = argument
            return
        assert isinstance(properties, dict)
        required = schema.get("required") if body.required else []
        fields: list[tuple[str, str, bool]] = []  # (body key, argument, required)
        for key, value in properties.items():
            argument = self.names.claim(key, "body")
            if argument != key:
                self.renamed_body = True
                self.note("renamed", f"body field {key!r} is the argument {argument!r}")
            is_required = isinstance(required, list) and key in required
            self.add(argument, value, required=is_required)
            fields.append((key, argument, is_required))
        if self._default_body_fits():
            return
        self.parts.body = _merge_expression(fields)

    def _default_body_fits(self) -> bool:
        """The builder's default body sends every argument that is not in the path, a bare
        query expression or the idempotency header, under its own name: the same body
        unless a body field was renamed or a query expression is more than a name."""
        if self.renamed_body:
            return False
        return all(_IDENTIFIER.fullmatch(e) for e in self.parts.query.values())


def _merge_expression(fields: list[tuple[str, str, bool]]) -> str:
    required = ", ".join(
        f"{jmespath_identifier(key)}: {argument}" for key, argument, needed in fields if needed
    )
    parts = [f"{{{required}}}" if required else "`{}`"]
    parts += [
        f"({argument} != null && {{{jmespath_identifier(key)}: {argument}}}) || `{{}}`"
        for key, argument, needed in fields
        if not needed
    ]
    return f"merge({', '.join(parts)})"


def build_request(
    method: str,
    path: str,
    parameters: list[Parameter],
    body: Body | None,
    resolver: SchemaResolver,
) -> RequestParts:
    """Raises ``Unsupported`` when the operation cannot be called through Crank."""
    builder = _Builder(method, path, resolver)
    builder.path_parameters(parameters)
    for parameter in parameters:
        if parameter.location == "query":
            builder.query_parameter(parameter)
    for parameter in parameters:
        if parameter.location in ("header", "cookie"):
            builder.header_parameter(parameter)
    if body is not None:
        builder.body(body)
    return builder.parts
