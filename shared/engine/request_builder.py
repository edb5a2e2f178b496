"""Request building: validated arguments + secrets → an encoded ``BuiltRequest``.

Path variables (docs/architecture.md, "Request building") are simple
``{var}`` expansions inside path segments, each value percent-encoded with ``quote(value, safe="")``
so that ``/``, ``?``, ``#`` and ``%`` can never change the path, query or host;
``""``, ``"."`` and ``".."`` are refused. Query and body come from the
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
- Basic auth: the secret is ``user:password``; one without a colon is a user
  with an empty password. A secret or idempotency value with CR, LF or NUL
  is refused (header injection).
- ``secret_values`` lists what an upstream may echo: the secret, and for
  basic auth also ``user:password`` as sent and the password alone;
  shared.engine.masking derives every escaped and encoded spelling from them.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

import jmespath.parser
import msgspec

from shared.engine.errors import Language, ToolError, invalid_arguments, secret_missing
from shared.engine.jmes import compile_expression
from shared.engine.masking import Masker, masker_for
from shared.engine.spec import OperationSpec

CONFIRMATION_ARGUMENT = "_crank_confirmation_token"
CONFIRMATION_TOKEN_PATTERN = "^ct_[A-Za-z0-9_-]+$"  # noqa: S105 - a shape, not a secret
_BODY_METHODS = frozenset({"POST", "PUT", "PATCH"})
_PATH_VARIABLE = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_HEADER_UNSAFE = ("\r", "\n", "\x00")
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
        self.path_variables: tuple[str, ...] = tuple(_PATH_VARIABLE.findall(parts.path))
        self._query = (
            None
            if request.query is None
            else [(name, compile_expression(expr)) for name, expr in request.query.items()]
        )
        self._body = None if request.body is None else compile_expression(request.body)
        self._static_headers = tuple((request.headers or {}).items())
        self._auth = request.auth
        idempotency = spec.execution_config.idempotency
        self._idempotency = (
            None if idempotency is None else (idempotency.argument, idempotency.header)
        )
        excluded = {*self.path_variables, CONFIRMATION_ARGUMENT}
        if idempotency is not None:
            excluded.add(idempotency.argument)
        if request.query is not None:
            excluded.update(f for f in map(_bare_field, request.query.values()) if f)
        self._default_excluded = frozenset(excluded)
        properties = spec.input.get("properties")
        self._declared = tuple(properties) if isinstance(properties, dict) else ()

    def _fail(self, field: str, rule: str, explanation: str) -> ToolError:
        return invalid_arguments([(field, rule, explanation)], language=self._language)

    def _path(self, arguments: Mapping[str, Any]) -> str:
        def expand(match: re.Match[str]) -> str:
            name = match.group(1)
            value = arguments.get(name)
            if value is None:
                raise self._fail(f"$.{name}", "required", "a path value is required")
            text = render_scalar(value)
            if text is None:
                raise self._fail(f"$.{name}", "type", "a path value must be a string or number")
            if text in ("", ".", ".."):
                raise self._fail(f"$.{name}", "path", f"{text!r} is not allowed as a path value")
            return quote(text, safe="")

        return _PATH_VARIABLE.sub(expand, self._static_path)

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

    def _auth_header(self, secrets: Mapping[str, str]) -> tuple[tuple[str, str], tuple[str, ...]]:
        auth = self._auth
        assert auth is not None
        secret = secrets.get(auth.secret)
        if not secret:
            raise secret_missing(auth.secret, language=self._language)
        if any(char in secret for char in _HEADER_UNSAFE):
            raise secret_missing(auth.secret, language=self._language)
        if auth.type == "bearer":
            return ("Authorization", f"Bearer {secret}"), (secret,)
        if auth.type == "basic":
            credentials = secret if ":" in secret else f"{secret}:"
            token = base64.b64encode(credentials.encode()).decode()
            password = credentials.partition(":")[2]
            # The token is base64 of the credentials: the masker covers it.
            values = (secret, credentials, password)
            return ("Authorization", f"Basic {token}"), tuple(dict.fromkeys(v for v in values if v))
        assert auth.name is not None  # spec validation requires it for type=header
        return (auth.name, secret), (secret,)

    def build(
        self, arguments: Mapping[str, Any], secrets: Mapping[str, str] | None = None
    ) -> BuiltRequest:
        """``arguments`` already validated against the input schema."""
        arguments = {k: v for k, v in arguments.items() if k != CONFIRMATION_ARGUMENT}
        path = self._path(arguments)
        query = "&".join(
            f"{quote(name, safe='')}={quote(value, safe='')}"
            for name, value in self._query_pairs(arguments)
        )
        if self._static_query:
            query = f"{self._static_query}&{query}" if query else self._static_query
        url = urlunsplit((*self._prefix, path, query, ""))
        body = self._body_bytes(arguments)
        headers: list[tuple[str, str]] = list(self._static_headers)
        secret_values: tuple[str, ...] = ()  # what the masker hides: see the module docstring
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
        if self._auth is not None:
            header_pair, secret_values = self._auth_header(secrets or {})
            headers.append(header_pair)
        return BuiltRequest(
            method=self._method,
            url=url,
            headers=tuple(headers),
            body=body,
            content_type=_JSON if body is not None else None,
            secret_values=secret_values,
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
]
