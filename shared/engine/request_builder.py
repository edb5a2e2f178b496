"""Request building: validated arguments + secrets → an encoded ``BuiltRequest``.

Path variables (docs/architecture.md, "Request building") are ``{var}``
expansions inside path segments, each value percent-encoded with
``quote(value, safe="")`` so that ``?``, ``#`` and ``%`` can never change the
path, query or host. A ``{var}`` value cannot hold ``/`` or ``\\``, even
percent-encoded (an upstream may decode ``%2F`` before it normalises); only a
declared reserved expansion ``{+var}`` carries ``/`` (``quote(value, safe="/")``),
and then no empty segment. ``""`` and control characters are refused, and so
is every built segment that is or decodes to a dot segment (``forms_dot_segment``),
which covers adjacent variables (``{a}{b}`` = ``.`` + ``.``): the built path
keeps the template's static prefix under any normalisation. Query and body come from the
operation's JMESPath mappings or, without them, from the defaults: arguments
not used in the path go to the query for GET/DELETE and to a JSON body for
POST/PUT/PATCH. The idempotency argument never goes anywhere by the default
mapping (it travels in its header) and ``_crank_confirmation_token`` never
goes upstream at all.

Further decisions:

- Scalars render canonically: booleans ``true``/``false``, numbers as their
  JSON text, strings as they are. In the query, a list becomes repeated
  parameters (its nulls skipped), an object becomes compact JSON, null or
  missing omits the parameter.
- Default query order: the order of ``input.properties``, then undeclared
  arguments sorted by name, so equal arguments give equal URLs.
- POST/PUT/PATCH with an explicit ``request.query`` and no ``request.body``:
  the default body leaves out the arguments that a query expression names
  directly (``{symbols: quote}`` takes ``quote`` out of the body).
- A default body with nothing left in it is no body at all; a
  ``request.body`` expression that yields null sends no body.
- Auth (``AuthSpec``, one or a list of several): ``bearer`` and ``header``
  send the secret in a header,
  ``query`` appends ``name=<secret>`` to the query (an argument of that name
  is never sent by the default mapping), ``basic`` sends ``Authorization:
  Basic``. Basic's ``secret`` is ``user:password`` (one without a colon is a
  user with an empty password); or ``username`` (literal or secret, no colon)
  with an optional ``password`` secret. A secret or idempotency value with CR,
  LF or NUL is refused (header injection).
- ``secret_values`` lists what an upstream may echo: every secret value, and
  for basic auth also ``user:password`` as sent and the password alone;
  shared.engine.masking derives every escaped and encoded spelling from them,
  the percent-encoded one in the URL included.
"""

from __future__ import annotations

import base64
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, unquote, urlsplit, urlunsplit

import jmespath.parser
import msgspec

from shared.engine.errors import Language, ToolError, invalid_arguments, secret_missing
from shared.engine.jmes import compile_expression
from shared.engine.masking import Masker, masker_for
from shared.engine.spec import AuthSpec, OperationSpec, SecretRef

CONFIRMATION_ARGUMENT = "_crank_confirmation_token"
CONFIRMATION_TOKEN_PATTERN = "^ct_[A-Za-z0-9_-]+$"  # noqa: S105 - a shape, not a secret
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_PATH_VARIABLE = re.compile(r"\{(\+?)([A-Za-z_][A-Za-z0-9_]*)\}")  # {var}, {+var}
_HEADER_UNSAFE = ("\r", "\n", "\x00")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
# How often an upstream may percent-decode a path before it normalises it;
# bounded so that "%252525..." costs a few passes, not one per level.
_DECODE_ROUNDS = 3
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"  # RFC 3986 pchar, "/" and existing escapes
_JSON = "application/json"
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class BuiltRequest:
    """An upstream request ready to send: the URL is already encoded."""

    method: str
    url: str
    headers: tuple[tuple[str, str], ...]
    body: bytes | None
    content_type: str | None
    # The values to mask in anything shown, stored or logged (see the module
    # docstring). Not part of the repr.
    secret_values: tuple[str, ...] = field(default=(), repr=False)

    @property
    def masker(self) -> Masker:
        """Masks every spelling of ``secret_values`` (built once per set of values)."""
        return masker_for(self.secret_values)

    def __repr__(self) -> str:
        return f"BuiltRequest({self.method} {self.masker.text(self.url)})"

    def redacted(self) -> dict[str, Any]:
        """The request for approval records and try-it, with every secret value masked."""
        masker = self.masker
        body = None
        if self.body is not None:
            body = masker.text(self.body.decode("utf-8", errors="replace"))
        return {
            "method": self.method,
            "url": masker.text(self.url),
            "headers": [[name, masker.text(value)] for name, value in self.headers],
            "body": body,
            "content_type": self.content_type,
        }


def _decoded(text: str, rounds: int) -> str:
    for _ in range(rounds):
        decoded = unquote(text)
        if decoded == text:
            break
        text = decoded
    return text


def forms_dot_segment(segment: str) -> bool:
    """Whether an encoded path segment is, or decodes to, a dot segment anywhere.

    Decoded once for Crank's own encoding and ``_DECODE_ROUNDS`` more times,
    compatibility-normalised (``\uff0e`` is a dot to a server that applies NFKC)
    and split on ``/`` and ``\\`` (servers that decode ``%2F`` or treat ``\\`` as
    ``/``), a piece made only of dots (``..``, ``...``), also before a ``;``
    parameter (``..;x``, read as ``..`` by some servers) or trailing spaces, is one.
    """
    decoded = _decoded(segment, 1 + _DECODE_ROUNDS)
    for piece in re.split(r"[/\\]", unicodedata.normalize("NFKC", decoded)):
        core = piece.split(";", 1)[0].strip()
        if core and not core.strip("."):
            return True
    return False


def render_scalar(value: Any) -> str | None:
    """The text of a string, number or boolean; None for anything else."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return _encoder.encode(value).decode()
    return None


def _query_values(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, list):
        return [text for item in value if item is not None for text in _query_values(item)]
    text = render_scalar(value)
    if text is None:  # an object (or a list inside a list's object): compact JSON
        return [_encoder.encode(value).decode()]
    return [text]


def _bare_field(expression: str) -> str | None:
    """The argument a JMESPath expression names directly (``quote``), if any."""
    ast = jmespath.parser.Parser().parse(expression).parsed
    if ast.get("type") == "field" and isinstance(ast.get("value"), str):
        return str(ast["value"])
    return None


class RequestBuilder:
    """Compiled once per published operation version; ``build`` per call."""

    def __init__(self, spec: OperationSpec, *, language: Language = "en") -> None:
        request = spec.request
        self._language: Language = language
        self._method = request.method
        parts = urlsplit(request.url)
        self._prefix = (parts.scheme, parts.netloc)
        # Static text is encoded once (non-ASCII, say), keeping what is already encoded.
        self._static_path = quote(parts.path, safe=_PATH_SAFE + "{}")
        self._static_query = parts.query
        # Each "/"-separated piece of the template with the variables in it: a
        # built piece is checked as a whole, so adjacent values cannot form "..".
        self._segments = tuple(
            (segment, tuple(name for _, name in _PATH_VARIABLE.findall(segment)))
            for segment in self._static_path.split("/")
        )
        self._reserved = frozenset(
            name for reserved, name in _PATH_VARIABLE.findall(parts.path) if reserved
        )
        self.path_variables: tuple[str, ...] = tuple(
            dict.fromkeys(name for _, names in self._segments for name in names)
        )
        self._query = (
            None
            if request.query is None
            else [(name, compile_expression(expr)) for name, expr in request.query.items()]
        )
        self._body = None if request.body is None else compile_expression(request.body)
        self._static_headers = tuple((request.headers or {}).items())
        self._auth = tuple(auth for _, auth in request.auth_entries())
        idempotency = spec.execution_config.idempotency
        self._idempotency = (
            None if idempotency is None else (idempotency.argument, idempotency.header)
        )
        excluded = {*self.path_variables, CONFIRMATION_ARGUMENT}
        # A credential's query parameter is the secret's alone.
        excluded.update(a.name for a in self._auth if a.type == "query" and a.name)
        if idempotency is not None:
            excluded.add(idempotency.argument)
        if request.query is not None:
            excluded.update(f for f in map(_bare_field, request.query.values()) if f)
        self._default_excluded = frozenset(excluded)
        properties = spec.input.get("properties")
        self._declared = tuple(properties) if isinstance(properties, dict) else ()

    def _fail(self, field: str, rule: str, explanation: str) -> ToolError:
        return invalid_arguments([(field, rule, explanation)], language=self._language)

    def _path_value(self, name: str, arguments: Mapping[str, Any]) -> str:
        """One variable's value, checked and encoded (see the module docstring)."""
        value = arguments.get(name)
        if value is None:
            raise self._fail(f"$.{name}", "required", "a path value is required")
        text = render_scalar(value)
        if text is None:
            raise self._fail(f"$.{name}", "type", "a path value must be a string or number")
        if text == "":
            raise self._fail(f"$.{name}", "path", "'' is not allowed as a path value")
        decoded = _decoded(text, _DECODE_ROUNDS)
        if _CONTROL.search(decoded):
            raise self._fail(f"$.{name}", "path", "a path value cannot hold control characters")
        if "\\" in decoded:
            raise self._fail(f"$.{name}", "path", "a path value cannot hold '\\'")
        if name not in self._reserved:
            if "/" in decoded:
                raise self._fail(f"$.{name}", "path", "a path value cannot hold '/'")
            return quote(text, safe="")
        if "" in decoded.split("/"):
            raise self._fail(f"$.{name}", "path", "no empty segment: no leading, trailing or '//'")
        return quote(text, safe="/")

    def _path(self, arguments: Mapping[str, Any]) -> str:
        values = {name: self._path_value(name, arguments) for name in self.path_variables}
        built: list[str] = []
        for template, names in self._segments:
            segment = _PATH_VARIABLE.sub(lambda m: values[m.group(2)], template)
            if names and forms_dot_segment(segment):
                problem = "the path values form a '.' or '..' segment"
                raise invalid_arguments(
                    [(f"$.{name}", "path", problem) for name in dict.fromkeys(names)],
                    language=self._language,
                )
            built.append(segment)
        return "/".join(built)

    def _ordered_defaults(self, arguments: Mapping[str, Any]) -> list[str]:
        names = [n for n in self._declared if n in arguments]
        names += sorted(n for n in arguments if n not in self._declared)
        return [n for n in names if n not in self._default_excluded]

    def _query_pairs(self, arguments: Mapping[str, Any]) -> list[tuple[str, str]]:
        if self._query is not None:
            return [
                (name, text)
                for name, expression in self._query
                for text in _query_values(expression.search(arguments))
            ]
        if self._method in _BODY_METHODS:
            return []
        return [
            (name, text)
            for name in self._ordered_defaults(arguments)
            for text in _query_values(arguments[name])
        ]

    def _body_bytes(self, arguments: Mapping[str, Any]) -> bytes | None:
        if self._method not in _BODY_METHODS:
            return None
        if self._body is not None:
            value = self._body.search(arguments)
        else:
            value = {name: arguments[name] for name in self._ordered_defaults(arguments)} or None
        return None if value is None else _encoder.encode(value)

    def _secret(self, name: str, secrets: Mapping[str, str]) -> str:
        value = secrets.get(name)
        if not value or any(char in value for char in _HEADER_UNSAFE):
            raise secret_missing(name, language=self._language)
        return value

    def _basic_credentials(self, auth: AuthSpec, secrets: Mapping[str, str]) -> tuple[str, str]:
        """(``user:password``, the password) as sent."""
        if auth.secret is not None:
            credentials = self._secret(auth.secret, secrets)
            credentials = credentials if ":" in credentials else f"{credentials}:"
            return credentials, credentials.partition(":")[2]
        username = auth.username
        if isinstance(username, SecretRef):
            user = self._secret(username.secret, secrets)
            if ":" in user:  # RFC 7617: a user-id has no colon
                raise secret_missing(username.secret, language=self._language)
        else:
            assert username is not None  # spec validation: basic has secret or username
            user = username
        password = auth.password
        secret = self._secret(password.secret, secrets) if isinstance(password, SecretRef) else ""
        return f"{user}:{secret}", secret

    def _auth_parts(
        self, auth: AuthSpec, secrets: Mapping[str, str]
    ) -> tuple[tuple[str, str] | None, tuple[str, str] | None, tuple[str, ...]]:
        """(header, query parameter, secret values): one of the first two is set."""
        if auth.type == "basic":
            credentials, password = self._basic_credentials(auth, secrets)
            token = base64.b64encode(credentials.encode()).decode()
            # The token is base64 of the credentials: the masker covers it.
            values = (*(self._secret(n, secrets) for n in auth.secret_names()), credentials)
            values = tuple(dict.fromkeys(v for v in (*values, password) if v))
            return ("Authorization", f"Basic {token}"), None, values
        assert auth.secret is not None  # spec validation requires it for these types
        secret = self._secret(auth.secret, secrets)
        if auth.type == "bearer":
            return ("Authorization", f"Bearer {secret}"), None, (secret,)
        assert auth.name is not None  # spec validation requires it for header and query
        if auth.type == "query":
            return None, (auth.name, secret), (secret,)
        return (auth.name, secret), None, (secret,)

    def build(
        self, arguments: Mapping[str, Any], secrets: Mapping[str, str] | None = None
    ) -> BuiltRequest:
        """``arguments`` already validated against the input schema."""
        arguments = {k: v for k, v in arguments.items() if k != CONFIRMATION_ARGUMENT}
        path = self._path(arguments)
        pairs = self._query_pairs(arguments)
        headers: list[tuple[str, str]] = list(self._static_headers)
        hidden: list[str] = []  # what the masker hides: see the module docstring
        auth_headers: list[tuple[str, str]] = []
        for auth in self._auth:
            auth_header, auth_query, values = self._auth_parts(auth, secrets or {})
            hidden += values
            if auth_header is not None:
                auth_headers.append(auth_header)
            if auth_query is not None:
                pairs.append(auth_query)
        query = "&".join(f"{quote(name, safe='')}={quote(value, safe='')}" for name, value in pairs)
        if self._static_query:
            query = f"{self._static_query}&{query}" if query else self._static_query
        url = urlunsplit((*self._prefix, path, query, ""))
        body = self._body_bytes(arguments)
        if body is not None:
            headers.append(("Content-Type", _JSON))
        if self._idempotency is not None:
            argument, header = self._idempotency
            value = render_scalar(arguments.get(argument))
            if not value:
                raise self._fail(f"$.{argument}", "required", "the idempotency key is required")
            if any(char in value for char in _HEADER_UNSAFE):
                raise self._fail(f"$.{argument}", "pattern", "no control characters allowed")
            headers.append((header, value))
        headers += auth_headers
        return BuiltRequest(
            method=self._method,
            url=url,
            headers=tuple(headers),
            body=body,
            content_type=_JSON if body is not None else None,
            secret_values=tuple(dict.fromkeys(hidden)),
        )


def build_request(
    spec: OperationSpec,
    arguments: Mapping[str, Any],
    secrets: Mapping[str, str] | None = None,
) -> BuiltRequest:
    """One-off convenience; the gateway keeps a compiled ``RequestBuilder``."""
    return RequestBuilder(spec).build(arguments, secrets)


__all__ = [
    "CONFIRMATION_ARGUMENT",
    "CONFIRMATION_TOKEN_PATTERN",
    "BuiltRequest",
    "RequestBuilder",
    "build_request",
    "forms_dot_segment",
]
