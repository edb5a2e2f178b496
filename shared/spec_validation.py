"""Write-time checks of an operation or agent spec, reported per field.

Decoding (types, unknown fields, enums) is msgspec's job; this module checks
what types cannot say: tool names, JSON Schema validity, URL templates that
cannot escape their path segment, JMESPath that compiles, safety rules.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import jmespath
import jmespath.exceptions
import msgspec
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from shared.spec import AgentSpec, OperationSpec

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
SLUG = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
SECRET_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,128}$")
HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}$")
_PATH_VARIABLE = re.compile(r"\{([^{}]*)\}")
_VARIABLE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")
# Headers the request builder owns; a static value would break framing or auth.
_RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}

MAX_TIMEOUT_MS = 120_000
MAX_RETRIES = 5
MAX_ITEMS = 10_000
MAX_BYTES = 10 * 1024 * 1024


class FieldError(msgspec.Struct, frozen=True):
    field: str
    message: str


def decode_error_to_field(error: msgspec.ValidationError) -> FieldError:
    """Turn msgspec's ``... - at `$.request.method``` into a field error."""
    text = str(error)
    message, _, where = text.rpartition(" - at `")
    if not message:
        return FieldError("", text)
    path = where.rstrip("`").removeprefix("$").lstrip(".")
    return FieldError(path, message)


def _schema_refs(node: Any, where: str) -> Iterator[tuple[str, str]]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield where, value
            else:
                yield from _schema_refs(value, f"{where}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _schema_refs(value, f"{where}[{index}]")


def _check_schema(schema: dict[str, Any], field: str, *, root_object: bool) -> list[FieldError]:
    errors: list[FieldError] = []
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        location = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in exc.path)
        errors.append(FieldError(f"{field}{location}", f"not a valid JSON Schema: {exc.message}"))
    if root_object and schema.get("type") != "object":
        errors.append(FieldError(f"{field}.type", 'the input schema root must be "type: object"'))
    for where, ref in _schema_refs(schema, field):
        if not ref.startswith("#"):
            errors.append(
                FieldError(where, f"$ref {ref!r} points outside the document; only '#...' refs")
            )
    return errors


def _check_jmespath(expression: str, field: str) -> list[FieldError]:
    try:
        jmespath.compile(expression)
    except jmespath.exceptions.JMESPathError as exc:
        return [FieldError(field, f"JMESPath does not compile: {exc}")]
    return []


def path_variables(url: str) -> list[str]:
    return _PATH_VARIABLE.findall(urlsplit(url).path)


def _check_url(spec: OperationSpec) -> list[FieldError]:
    field = "request.url"
    url = spec.request.url
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        return [FieldError(field, "the URL must start with http:// or https://")]
    if not parts.hostname or "{" in parts.netloc or "}" in parts.netloc:
        return [FieldError(field, "the URL needs a fixed host; the host cannot be templated")]
    if parts.username or parts.password:
        return [FieldError(field, "credentials in the URL are not allowed; use request.auth")]
    if "{" in parts.query or "}" in parts.query or parts.fragment:
        return [FieldError(field, "templates belong in the path; use request.query for the query")]
    errors: list[FieldError] = []
    properties = spec.input.get("properties") or {}
    required = set(spec.input.get("required") or [])
    for segment in parts.path.split("/"):
        stripped = _PATH_VARIABLE.sub("", segment)
        if "{" in stripped or "}" in stripped:
            errors.append(FieldError(field, f"unbalanced braces in path segment {segment!r}"))
            continue
        for name in _PATH_VARIABLE.findall(segment):
            if not _VARIABLE_NAME.match(name):
                errors.append(
                    FieldError(
                        field,
                        f"path expression {{{name}}} is not a simple variable: only {{name}} "
                        "expansions inside a path segment are allowed",
                    )
                )
            elif name not in properties:
                errors.append(FieldError(field, f"path variable {name!r} is not declared in input"))
            elif name not in required:
                errors.append(
                    FieldError("input.required", f"path variable {name!r} must be required")
                )
    return errors


def validate_operation(spec: OperationSpec) -> list[FieldError]:
    """Every problem with a decoded operation spec; empty when it may be saved."""
    errors: list[FieldError] = []
    if not TOOL_NAME.match(spec.name):
        errors.append(
            FieldError("name", "a tool name is 1-64 characters of letters, digits, _ and -")
        )
    if not spec.description.strip():
        errors.append(FieldError("description", "a description is required"))
    errors += _check_schema(spec.input, "input", root_object=True)
    errors += _check_url(spec)

    request = spec.request
    for param, expression in (request.query or {}).items():
        errors += _check_jmespath(expression, f"request.query.{param}")
    if request.body is not None:
        errors += _check_jmespath(request.body, "request.body")
        if request.method in ("GET", "DELETE"):
            errors.append(FieldError("request.body", f"{request.method} requests carry no body"))
    for header in request.headers or {}:
        if not HEADER_NAME.match(header):
            errors.append(FieldError(f"request.headers.{header}", "not a valid header name"))
        elif header.lower() in _RESERVED_HEADERS:
            errors.append(FieldError(f"request.headers.{header}", "this header is set by Crank"))
    if request.auth is not None:
        if not SECRET_NAME.match(request.auth.secret):
            errors.append(FieldError("request.auth.secret", "not a valid secret name"))
        if request.auth.type == "header":
            if not request.auth.name or not HEADER_NAME.match(request.auth.name):
                errors.append(FieldError("request.auth.name", "type=header needs a header name"))
        elif request.auth.name is not None:
            errors.append(FieldError("request.auth.name", "only type=header takes a name"))

    response = spec.response
    if response.select is not None:
        errors += _check_jmespath(response.select, "response.select")
    if not 1 <= response.max_items <= MAX_ITEMS:
        errors.append(FieldError("response.max_items", f"must be between 1 and {MAX_ITEMS}"))
    if not 256 <= response.max_bytes <= MAX_BYTES:
        errors.append(FieldError("response.max_bytes", f"must be between 256 and {MAX_BYTES}"))
    if response.output_schema is not None:
        errors += _check_schema(response.output_schema, "response.output_schema", root_object=False)

    execution = spec.execution_config
    if not 100 <= execution.timeout_ms <= MAX_TIMEOUT_MS:
        errors.append(
            FieldError("execution_config.timeout_ms", f"must be between 100 and {MAX_TIMEOUT_MS}")
        )
    if not 0 <= execution.retries <= MAX_RETRIES:
        errors.append(
            FieldError("execution_config.retries", f"must be between 0 and {MAX_RETRIES}")
        )
    if execution.idempotency is not None:
        argument = execution.idempotency.argument
        if argument not in (spec.input.get("properties") or {}):
            errors.append(
                FieldError("execution_config.idempotency.argument", f"{argument!r} is not in input")
            )
        elif argument not in (spec.input.get("required") or []):
            errors.append(
                FieldError(
                    "execution_config.idempotency.argument",
                    f"{argument!r} must be required in input when it is the idempotency key",
                )
            )
        if not HEADER_NAME.match(execution.idempotency.header):
            errors.append(
                FieldError("execution_config.idempotency.header", "not a valid header name")
            )

    if request.method == "DELETE" and spec.safety.confirmation is False:
        errors.append(
            FieldError(
                "safety.confirmation",
                "DELETE always needs two-step confirmation; it cannot be switched off",
            )
        )
    if "_crank_confirmation_token" in (spec.input.get("properties") or {}):
        errors.append(
            FieldError("input.properties", "_crank_confirmation_token is reserved for Crank")
        )
    return errors


def validate_agent(spec: AgentSpec) -> list[FieldError]:
    errors: list[FieldError] = []
    if not SLUG.match(spec.slug):
        errors.append(
            FieldError("slug", "a slug is 1-63 lowercase letters, digits and -, starting alnum")
        )
    seen: set[str] = set()
    for index, name in enumerate(spec.operations):
        if not TOOL_NAME.match(name):
            errors.append(FieldError(f"operations[{index}]", f"{name!r} is not a valid tool name"))
        elif name in seen:
            errors.append(FieldError(f"operations[{index}]", f"{name!r} is listed twice"))
        seen.add(name)
    if spec.rate_limit is not None:
        if spec.rate_limit.requests < 1:
            errors.append(FieldError("rate_limit.requests", "must be at least 1"))
        if not 1 <= spec.rate_limit.per_seconds <= 86400:
            errors.append(FieldError("rate_limit.per_seconds", "must be between 1 and 86400"))
    return errors
