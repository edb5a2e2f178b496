"""Write-time checks of an operation or agent spec, reported per field.

Decoding (types, unknown fields, enums) is msgspec's job; this module checks
what types cannot say: tool names, JSON Schema validity, URL templates that
cannot escape their path segment, JMESPath that compiles, headers, safety
rules. Every name check is a ``fullmatch`` (a ``$`` would accept a trailing
newline).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl, urlsplit

import jmespath
import jmespath.exceptions
import msgspec
from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError
from referencing import Registry
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

from shared.engine.answer_limits import MAX_RAW_BYTES
from shared.engine.credentials import static_credentials
from shared.engine.metaschema import surely_valid
from shared.engine.request_builder import forms_dot_segment
from shared.engine.schema_keywords import SCHEMA_CHECK_FORMAT_CHECKER, UNEVALUATED_WITH_PATTERNS
from shared.engine.schema_patterns import pattern_problem
from shared.engine.spec import (
    WEBHOOK_EVENTS,
    WEBHOOK_FORMATS,
    AgentAuth,
    AgentSpec,
    AuthSpec,
    OperationSpec,
    RequestSpec,
    SecretRef,
    WebhookSpec,
)
from shared.engine.spec_memo import memoized_by_spec
from shared.engine.unknown_fields import with_suggestion

if TYPE_CHECKING:
    from referencing._core import Resolver  # not re-exported at the top level

# Use with fullmatch only.
TOOL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,62}")
SECRET_NAME = re.compile(r"[A-Za-z0-9_.-]{1,128}")
HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]{1,128}")
_PATH_VARIABLE = re.compile(r"\{([^{}]*)\}")
_VARIABLE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
QUERY_NAME = re.compile(r"[A-Za-z0-9_.~\[\]-]{1,128}")
_USERNAME = re.compile(r"[^:\x00-\x1f\x7f]{1,256}")  # RFC 7617: no colon in a user-id
# Headers the request builder owns; a configured value would break framing.
_RESERVED_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}
# The idempotency header carries an argument; these carry credentials.
_CREDENTIAL_HEADERS = {"authorization", "proxy-authorization", "cookie"}
_HEADER_VALUE_FORBIDDEN = ("\r", "\n", "\x00")
_PATH_VARIABLE_TYPES = {"string", "integer", "number"}
DIALECT_2020_12 = "https://json-schema.org/draft/2020-12/schema"
_DIALECTS = {DIALECT_2020_12, DIALECT_2020_12 + "#"}
_REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
_RESOLVED_KEYWORDS = ("$ref", "$dynamicRef")  # $recursiveRef is not a 2020-12 keyword
# Where 2020-12 keeps subschemas (referencing's DRAFT202012 lists the same).
_IN_VALUE = (
    "additionalProperties",
    "contains",
    "contentSchema",
    "else",
    "if",
    "items",
    "not",
    "propertyNames",
    "then",
    "unevaluatedItems",
    "unevaluatedProperties",
)
_IN_ARRAY = ("allOf", "anyOf", "oneOf", "prefixItems")
_IN_MAP = ("$defs", "definitions", "dependentSchemas", "patternProperties", "properties")

MAX_TIMEOUT_MS = 120_000
MAX_RETRIES = 5
MAX_ITEMS = 10_000
MAX_BYTES = 10 * 1024 * 1024


class FieldError(msgspec.Struct, frozen=True):
    """One problem of a spec: ``field`` is its path in the spec (``request.url``)."""

    field: str
    message: str


def decode_error_to_field(error: msgspec.ValidationError, root: Any = None) -> FieldError:
    """Turn msgspec's ``... - at `$.request.method``` into a field error; with ``root``,
    the type decoded, an unknown field gets a "did you mean" (shared.engine.unknown_fields)."""
    text = str(error)
    message, _, where = text.rpartition(" - at `")
    if not message:
        message, path = text, ""
    else:
        path = where.rstrip("`").removeprefix("$").lstrip(".")
    if root is not None:
        message = with_suggestion(message, path, root)
    return FieldError(path, message)


def _keyword_values(node: Any, keywords: tuple[str, ...], where: str) -> Iterator[tuple[str, str]]:
    """(path, value) of every string under one of ``keywords``, anywhere in ``node``.

    Deliberately not limited to schema positions: a local ``$ref`` may point
    anywhere in the document, and whatever it reaches is then read as a schema.
    """
    stack: list[tuple[Any, str]] = [(node, where)]
    while stack:
        current, path = stack.pop()
        if isinstance(current, dict):
            for key, value in current.items():
                if key in keywords and isinstance(value, str):
                    yield f"{path}.{key}", value
                else:
                    stack.append((value, f"{path}.{key}"))
        elif isinstance(current, list):
            stack.extend((value, f"{path}[{index}]") for index, value in enumerate(current))


def _subschemas(schema: dict[str, Any], where: str) -> Iterator[tuple[Any, str]]:
    for key in _IN_VALUE:
        if key in schema:
            yield schema[key], f"{where}.{key}"
    for key in _IN_ARRAY:
        if isinstance(schema.get(key), list):
            for index, value in enumerate(schema[key]):
                yield value, f"{where}.{key}[{index}]"
    for key in _IN_MAP:
        if isinstance(schema.get(key), dict):
            for name, value in schema[key].items():
                yield value, f"{where}.{key}.{name}"


def _unresolved_refs(schema: dict[str, Any], field: str) -> list[FieldError]:
    """Every local reference must resolve, to a schema, within the document.

    Resolution goes through ``referencing`` with an empty registry and no
    retrieval function, so nothing is ever fetched: a reference that would
    leave the document fails here instead.
    """
    root = DRAFT202012.create_resource(schema)
    base = root.id() or ""
    resolver = Registry().with_resource(base, root).crawl().resolver(base_uri=base)
    errors: list[FieldError] = []
    stack: list[tuple[Any, str, Resolver[Any]]] = [(schema, field, resolver)]
    while stack:
        node, where, scope = stack.pop()
        if not isinstance(node, dict):
            continue  # true/false schemas
        scope = scope.in_subresource(DRAFT202012.create_resource(node))
        for keyword in _RESOLVED_KEYWORDS:
            ref = node.get(keyword)
            if not isinstance(ref, str):
                continue
            try:
                target = scope.lookup(ref).contents
            except Unresolvable:
                errors.append(
                    FieldError(f"{where}.{keyword}", f"{ref!r} does not resolve in this schema")
                )
                continue
            if not isinstance(target, dict | bool):
                errors.append(
                    FieldError(f"{where}.{keyword}", f"{ref!r} points at something not a schema")
                )
        stack.extend((child, path, scope) for child, path in _subschemas(node, where))
    return errors


def schema_pattern_errors(schema: Any, field: str) -> list[FieldError]:
    """Every regex of ``schema`` that RE2 cannot compile, with RE2's reason.

    Schema patterns run on RE2, never on a backtracking engine (docs/architecture.md,
    "Schema patterns"): ``pattern`` values and ``patternProperties`` names, and
    ``unevaluatedProperties`` beside ``patternProperties`` (jsonschema would run
    those patterns with ``re``). Reads any value defensively: the linter calls it too.
    """
    errors: list[FieldError] = []
    stack: list[tuple[Any, str]] = [(schema, field)]
    uses_pattern_properties = False
    unevaluated: list[str] = []
    while stack:
        node, where = stack.pop()
        if not isinstance(node, dict):
            continue
        pattern = node.get("pattern")
        if isinstance(pattern, str):  # any other type is the metaschema's to refuse
            problem = pattern_problem(pattern)
            if problem is not None:
                errors.append(FieldError(f"{where}.pattern", _pattern_message(problem)))
        by_pattern = node.get("patternProperties")
        if isinstance(by_pattern, dict):
            uses_pattern_properties = True
            for name in by_pattern:
                problem = pattern_problem(str(name))
                if problem is not None:
                    errors.append(
                        FieldError(f"{where}.patternProperties.{name}", _pattern_message(problem))
                    )
        if "unevaluatedProperties" in node:
            unevaluated.append(f"{where}.unevaluatedProperties")
        stack.extend(_subschemas(node, where))
    if uses_pattern_properties:
        errors += [FieldError(where, UNEVALUATED_WITH_PATTERNS) for where in unevaluated]
    return sorted(errors, key=lambda error: error.field)


def _pattern_message(problem: str) -> str:
    return (
        f"RE2 cannot compile this pattern: {problem} (Crank runs schema patterns on RE2, "
        "which has no backreferences, lookahead or lookbehind)"
    )


def _check_schema(schema: dict[str, Any], field: str, *, root_object: bool) -> list[FieldError]:
    """A valid 2020-12 schema whose references all stay in, and resolve in, the document,
    and whose regexes RE2 compiles (they are judged by ``schema_pattern_errors``)."""
    errors: list[FieldError] = []
    try:
        if not surely_valid(schema):  # the quick walk says yes to most schemas
            Draft202012Validator.check_schema(schema, format_checker=SCHEMA_CHECK_FORMAT_CHECKER)
    except SchemaError as exc:
        location = "".join(f".{p}" if isinstance(p, str) else f"[{p}]" for p in exc.path)
        errors.append(FieldError(f"{field}{location}", f"not a valid JSON Schema: {exc.message}"))
    except RecursionError:
        return [FieldError(field, "the schema is nested too deeply")]
    if root_object and schema.get("type") != "object":
        errors.append(FieldError(f"{field}.type", 'the input schema root must be "type: object"'))
    errors += schema_pattern_errors(schema, field)
    for where, dialect in _keyword_values(schema, ("$schema",), field):
        if dialect not in _DIALECTS:
            errors.append(
                FieldError(where, f"only the JSON Schema 2020-12 dialect ({DIALECT_2020_12})")
            )
    refs = list(_keyword_values(schema, _REF_KEYWORDS, field))
    for where, ref in refs:
        if not ref.startswith("#"):
            errors.append(
                FieldError(where, f"{ref!r} points outside the document; only '#...' refs")
            )
    # Without references and $id there is nothing to resolve (most tool schemas).
    if not errors and (refs or any(_keyword_values(schema, ("$id",), field))):
        try:
            errors += _unresolved_refs(schema, field)
        except ValueError:  # an $id that is no URI: urljoin refuses it
            errors.append(FieldError(field, "an $id of this schema is not a valid URI"))
    return errors


def _check_jmespath(expression: str, field: str) -> list[FieldError]:
    try:
        jmespath.compile(expression)
    except jmespath.exceptions.JMESPathError as exc:
        return [FieldError(field, f"JMESPath does not compile: {exc}")]
    return []


def path_variables(url: str) -> list[str]:
    return [name.removeprefix("+") for name in _PATH_VARIABLE.findall(urlsplit(url).path)]


def _input_properties(spec: OperationSpec) -> dict[str, Any]:
    properties = spec.input.get("properties")
    return properties if isinstance(properties, dict) else {}


def _input_required(spec: OperationSpec) -> list[Any]:
    required = spec.input.get("required")
    return required if isinstance(required, list) else []


def _check_url(spec: OperationSpec, *, input_valid: bool) -> list[FieldError]:
    """``input_valid`` False: the input schema was refused already, so the
    checks of path variables against it are skipped (they would only repeat)."""
    field = "request.url"
    url = spec.request.url
    # urlsplit silently drops tabs and newlines; the stored URL would keep them.
    if any(ord(char) <= 0x20 or ord(char) == 0x7F for char in url):
        return [FieldError(field, "a URL cannot contain spaces or control characters")]
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is not one
    except ValueError as exc:
        return [FieldError(field, f"not a valid URL: {exc}")]
    if parts.scheme not in ("http", "https"):
        return [FieldError(field, "the URL must start with http:// or https://")]
    if not parts.hostname or "{" in parts.netloc or "}" in parts.netloc:
        return [FieldError(field, "the URL needs a fixed host; the host cannot be templated")]
    if parts.username or parts.password:
        return [FieldError(field, "credentials in the URL are not allowed; use request.auth")]
    if "{" in parts.query or "}" in parts.query or parts.fragment:
        return [FieldError(field, "templates belong in the path; use request.query for the query")]
    errors: list[FieldError] = []
    properties = _input_properties(spec)
    required = _input_required(spec)
    for segment in parts.path.split("/"):
        stripped = _PATH_VARIABLE.sub("", segment)
        if "{" in stripped or "}" in stripped:
            errors.append(FieldError(field, f"unbalanced braces in path segment {segment!r}"))
            continue
        if segment == stripped and forms_dot_segment(segment):
            errors.append(
                FieldError(field, f"the path segment {segment!r} is a '.' or '..' segment")
            )
        for expression in _PATH_VARIABLE.findall(segment):
            name = expression.removeprefix("+")  # {+name}: reserved expansion, may carry "/"
            if not _VARIABLE_NAME.fullmatch(name):
                errors.append(
                    FieldError(
                        field,
                        f"path expression {{{expression}}} is not a simple variable: only "
                        "{name} and {+name} expansions inside a path segment are allowed",
                    )
                )
            elif not input_valid:
                continue
            elif name not in properties:
                errors.append(FieldError(field, f"path variable {name!r} is not declared in input"))
            elif name not in required:
                errors.append(
                    FieldError("input.required", f"path variable {name!r} must be required")
                )
            elif not _scalar_declaration(properties[name]):
                errors.append(
                    FieldError(
                        f"input.properties.{name}.type",
                        f"path variable {name!r} must be declared with type string, integer "
                        "or number",
                    )
                )
    return errors


def _scalar_declaration(declaration: Any) -> bool:
    kind = declaration.get("type") if isinstance(declaration, dict) else None
    return isinstance(kind, str) and kind in _PATH_VARIABLE_TYPES


def _check_header_name(name: str, field: str) -> list[FieldError]:
    if not HEADER_NAME.fullmatch(name):
        return [FieldError(field, "not a valid header name")]
    if name.lower() in _RESERVED_HEADERS:
        return [FieldError(field, "this header is set by Crank")]
    return []


def _check_headers(spec: OperationSpec) -> list[FieldError]:
    """Static headers, the auth header and the idempotency header: each valid,
    none reserved, no name configured twice (names compare case-insensitively)."""
    request = spec.request
    errors: list[FieldError] = []
    configured: list[tuple[str, str]] = []  # (lowercase name, field)
    for header, value in (request.headers or {}).items():
        field = f"request.headers.{header}"
        problems = _check_header_name(header, field)
        if any(char in value for char in _HEADER_VALUE_FORBIDDEN):
            problems.append(FieldError(field, "a header value cannot contain CR, LF or NUL"))
        errors += problems
        configured.append((header.lower(), field))
    for where, auth in request.auth_entries():
        if auth.type == "header" and auth.name:
            errors += _check_header_name(auth.name, f"{where}.name")
            configured.append((auth.name.lower(), f"{where}.name"))
        elif auth.type in ("bearer", "basic"):
            configured.append(("authorization", where))
    idempotency = spec.execution_config.idempotency
    if idempotency is not None:
        field = "execution_config.idempotency.header"
        problems = _check_header_name(idempotency.header, field)
        if not problems and idempotency.header.lower() in _CREDENTIAL_HEADERS:
            problems.append(FieldError(field, "a credential header cannot carry an argument"))
        errors += problems
        configured.append((idempotency.header.lower(), field))
    first: dict[str, str] = {}
    for name, field in configured:
        if name in first:
            errors.append(FieldError(field, f"header {name!r} is configured in {first[name]} too"))
        else:
            first[name] = field
    return errors


def _check_secret_name(name: str | None, field: str, kind: str) -> list[FieldError]:
    if name is None:
        return [FieldError(field, f"type={kind} needs the name of a workspace secret")]
    if not SECRET_NAME.fullmatch(name):
        return [FieldError(field, "not a valid secret name")]
    return []


def _check_basic(auth: AuthSpec, where: str) -> list[FieldError]:
    """``secret`` (``user:password``), or ``username`` with an optional ``password``."""
    if auth.username is None:
        if auth.password is not None:
            return [FieldError(f"{where}.password", "a password goes with a username")]
        return _check_secret_name(auth.secret, f"{where}.secret", "basic")
    if auth.secret is not None:
        return [FieldError(f"{where}.secret", "give either secret or username, not both")]
    errors: list[FieldError] = []
    if isinstance(auth.username, SecretRef):
        errors += _check_secret_name(auth.username.secret, f"{where}.username.secret", "basic")
    elif not _USERNAME.fullmatch(auth.username):
        errors.append(
            FieldError(f"{where}.username", "1-256 characters, no colon, no control characters")
        )
    if isinstance(auth.password, SecretRef):
        errors += _check_secret_name(auth.password.secret, f"{where}.password.secret", "basic")
    elif auth.password is not None:
        errors.append(
            FieldError(
                f"{where}.password",
                "a password in clear is shown to every viewer and in exports: put it in a "
                "workspace secret and name it here as {secret: NAME}",
            )
        )
    return errors


def _check_binding(auth: AuthSpec, where: str) -> list[FieldError]:
    """One binding: each auth type takes its own fields; secret references are valid names."""
    errors: list[FieldError] = []
    if auth.type != "basic":
        errors += _check_secret_name(auth.secret, f"{where}.secret", auth.type)
        for extra in ("username", "password"):
            if getattr(auth, extra) is not None:
                errors.append(FieldError(f"{where}.{extra}", "only type=basic takes it"))
    else:
        errors += _check_basic(auth, where)
    if auth.type in ("bearer", "basic"):
        if auth.name is not None:
            errors.append(FieldError(f"{where}.name", "only type=header or query take a name"))
    elif not auth.name:
        errors.append(FieldError(f"{where}.name", f"type={auth.type} needs a name"))
    elif auth.type == "query" and not QUERY_NAME.fullmatch(auth.name):
        errors.append(
            FieldError(
                f"{where}.name", "a query parameter name is 1-128 of A-Z a-z 0-9 _ . ~ [ ] -"
            )
        )
    return errors


def _check_auth(request: RequestSpec) -> list[FieldError]:
    """Every binding on its own, then the query parameters they set: each one set by
    nothing else in the request. Header names and clashes are checked with the other
    headers (``_check_headers``)."""
    if isinstance(request.auth, list) and not request.auth:
        return [FieldError("request.auth", "list at least one binding, or leave auth out")]
    try:
        taken = {key: "request.url" for key, _ in parse_qsl(urlsplit(request.url).query)}
    except ValueError:
        taken = {}  # the URL check reports it
    taken |= {name: "request.query" for name in request.query or {}}
    errors: list[FieldError] = []
    for where, auth in request.auth_entries():
        problems = _check_binding(auth, where)
        errors += problems
        if auth.type != "query" or auth.name is None or problems:
            continue
        if auth.name in taken:
            errors.append(
                FieldError(
                    f"{where}.name",
                    f"query parameter {auth.name!r} is set in {taken[auth.name]} too",
                )
            )
        taken[auth.name] = where
    return errors


@memoized_by_spec  # a pure function of the spec
def validate_operation(spec: OperationSpec) -> list[FieldError]:
    """Every problem with a decoded operation spec; empty when it may be saved."""
    errors: list[FieldError] = []
    if not TOOL_NAME.fullmatch(spec.name):
        errors.append(
            FieldError("name", "a tool name is 1-64 characters of letters, digits, _ and -")
        )
    if not spec.description.strip():
        errors.append(FieldError("description", "a description is required"))
    input_errors = _check_schema(spec.input, "input", root_object=True)
    errors += input_errors
    input_valid = not input_errors
    errors += _check_url(spec, input_valid=input_valid)

    request = spec.request
    for param, expression in (request.query or {}).items():
        errors += _check_jmespath(expression, f"request.query.{param}")
    if request.body is not None:
        errors += _check_jmespath(request.body, "request.body")
        if request.method in ("GET", "DELETE"):
            errors.append(FieldError("request.body", f"{request.method} requests carry no body"))
    errors += _check_auth(request)
    errors += _check_headers(spec)
    errors += [FieldError(found.field, found.message) for found in static_credentials(spec)]

    response = spec.response
    if response.select is not None:
        errors += _check_jmespath(response.select, "response.select")
    if not 1 <= response.max_items <= MAX_ITEMS:
        errors.append(FieldError("response.max_items", f"must be between 1 and {MAX_ITEMS}"))
    if not 256 <= response.max_bytes <= MAX_BYTES:
        errors.append(FieldError("response.max_bytes", f"must be between 256 and {MAX_BYTES}"))
    if response.max_raw_bytes is not None and not 1024 <= response.max_raw_bytes <= MAX_RAW_BYTES:
        errors.append(
            FieldError("response.max_raw_bytes", f"must be between 1024 and {MAX_RAW_BYTES}")
        )
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
    if execution.idempotency is not None and input_valid:
        argument = execution.idempotency.argument
        if argument not in _input_properties(spec):
            errors.append(
                FieldError("execution_config.idempotency.argument", f"{argument!r} is not in input")
            )
        elif argument not in _input_required(spec):
            errors.append(
                FieldError(
                    "execution_config.idempotency.argument",
                    f"{argument!r} must be required in input when it is the idempotency key",
                )
            )

    if request.method == "DELETE" and spec.safety.confirmation is False:
        errors.append(
            FieldError(
                "safety.confirmation",
                "DELETE always needs two-step confirmation; it cannot be switched off",
            )
        )
    if "_crank_confirmation_token" in _input_properties(spec):
        errors.append(
            FieldError("input.properties", "_crank_confirmation_token is reserved for Crank")
        )
    errors += _check_scopes("scopes", spec.scopes)
    return errors


# RFC 6749 section 3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ), so no space,
# quote or backslash; the bound keeps a scope list a reasonable size.
SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5B\x5D-\x7E]{1,128}")
MAX_SCOPES = 32


def _check_scopes(field: str, scopes: list[str]) -> list[FieldError]:
    if len(scopes) > MAX_SCOPES:
        return [FieldError(field, f"at most {MAX_SCOPES} scopes")]
    errors: list[FieldError] = []
    for index, scope in enumerate(scopes):
        if not SCOPE_TOKEN.fullmatch(scope):
            errors.append(
                FieldError(
                    f"{field}[{index}]",
                    f"{scope!r} is not an OAuth scope (RFC 6749 3.3: 1-128 printable "
                    "ASCII characters, no space, quote or backslash)",
                )
            )
        elif scope in scopes[:index]:
            errors.append(FieldError(f"{field}[{index}]", f"{scope!r} is listed twice"))
    return errors


def _check_agent_auth(auth: AgentAuth) -> list[FieldError]:
    errors: list[FieldError] = []
    for index, name in enumerate(auth.providers):
        if not SLUG.fullmatch(name):
            errors.append(
                FieldError(f"auth.providers[{index}]", f"{name!r} is not an identity provider name")
            )
        elif name in auth.providers[:index]:
            errors.append(FieldError(f"auth.providers[{index}]", f"{name!r} is listed twice"))
    if not auth.agent_keys and not auth.providers:
        errors.append(
            FieldError("auth.agent_keys", "with no providers, agent keys are the only way in")
        )
    return errors + _check_scopes("auth.scopes", auth.scopes)


MAX_APPROVAL_WAIT_S = 3600  # as CRANK_APPROVAL_WAIT_S


def validate_agent(spec: AgentSpec) -> list[FieldError]:
    """Every problem with a decoded agent spec; empty when it may be saved."""
    errors: list[FieldError] = []
    if not SLUG.fullmatch(spec.slug):
        errors.append(
            FieldError("slug", "a slug is 1-63 lowercase letters, digits and -, starting alnum")
        )
    seen: set[str] = set()
    for index, name in enumerate(spec.operations):
        if not TOOL_NAME.fullmatch(name):
            errors.append(FieldError(f"operations[{index}]", f"{name!r} is not a valid tool name"))
        elif name in seen:
            errors.append(FieldError(f"operations[{index}]", f"{name!r} is listed twice"))
        seen.add(name)
    if spec.rate_limit is not None:
        if spec.rate_limit.requests < 1:
            errors.append(FieldError("rate_limit.requests", "must be at least 1"))
        if not 1 <= spec.rate_limit.per_seconds <= 86400:
            errors.append(FieldError("rate_limit.per_seconds", "must be between 1 and 86400"))
    if spec.approval_wait_s is not None and not 0 <= spec.approval_wait_s <= MAX_APPROVAL_WAIT_S:
        errors.append(
            FieldError("approval_wait_s", f"must be between 0 and {MAX_APPROVAL_WAIT_S} seconds")
        )
    return errors + _check_agent_auth(spec.auth)


MAX_WEBHOOK_URL_CHARS = 2048


def _webhook_url_problem(raw: str) -> str | None:
    if len(raw) > MAX_WEBHOOK_URL_CHARS:
        return f"at most {MAX_WEBHOOK_URL_CHARS} characters"
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in raw):
        return "no spaces or control characters"
    try:
        parts = urlsplit(raw)
        parts.port  # noqa: B018 - parses the port, raising on a bad one
    except ValueError:
        return "not a URL"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return "an absolute http or https URL, e.g. https://hooks.example.com/crank"
    if parts.username is not None or parts.password is not None:
        return "no user or password in the URL; the signature authenticates Crank"
    if parts.fragment or raw.endswith("#"):
        return "no #fragment"
    return None


def validate_webhook(spec: WebhookSpec) -> list[FieldError]:
    """Every problem with a webhook subscription; fields relative to it (``events[1]``)."""
    errors: list[FieldError] = []
    url_problem = _webhook_url_problem(spec.url)
    if url_problem:
        errors.append(FieldError("url", url_problem))
    if not spec.events:
        errors.append(FieldError("events", "name at least one event"))
    for index, event in enumerate(spec.events):
        if event not in WEBHOOK_EVENTS:
            errors.append(
                FieldError(f"events[{index}]", f"must be one of {', '.join(WEBHOOK_EVENTS)}")
            )
    if len(set(spec.events)) != len(spec.events):
        errors.append(FieldError("events", "an event is named twice"))
    if spec.format not in WEBHOOK_FORMATS:
        errors.append(FieldError("format", f"must be one of {', '.join(WEBHOOK_FORMATS)}"))
    return errors
