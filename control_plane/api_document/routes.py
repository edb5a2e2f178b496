"""What the OpenAPI document says about each admin route beyond its signature:
derived, when the app is built, from the same declarations admission enforces
(docs/architecture.md, "The API document").

Litestar documents a handler's success answer, its parameters and its body.
Every other answer of an admin route follows from how the route is declared:

- any admin route: ``400 validation_failed`` (a NUL in the path or the query,
  a parameter out of range), ``401`` (no valid token) and ``429`` (too many
  failed tokens from the caller's address);
- a route above the viewer role, or for instance admins: ``403``;
- a route under ``/workspaces/{workspace}``: ``404`` (no such workspace, or no
  role in it; and whatever else the path names);
- a route that takes a body: ``400 bad_request`` (not JSON) and ``413``;
- a route that depends on ``if_match``: the ``If-Match`` header, required,
  ``428`` without it and ``409 stale_revision``.

A route adds the errors its service raises beyond these with ``errors=`` in
its decorator (e.g. ``409 already_exists``, ``422 lint_failed``). All of them
share the ``ErrorBody`` schema errors.py sends. Headers declared with
``response_headers=`` (the ETag) are documented on every success answer, and
each body gets its example (``examples.py``). :func:`document_routes` writes
this into each handler's ``responses`` and ``operation_class``, Litestar's own
places for it, and refuses to start an app whose body route has no example.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from http import HTTPStatus
from typing import Any, ClassVar

from litestar.exceptions import ImproperlyConfiguredException
from litestar.handlers import HTTPRouteHandler
from litestar.openapi.datastructures import ResponseSpec
from litestar.openapi.spec import (
    Example,
    OpenAPIHeader,
    OpenAPIResponse,
    OpenAPIType,
    Operation,
    Parameter,
    RequestBody,
    Schema,
)
from litestar.routes import BaseRoute, HTTPRoute

from control_plane.access import (
    INSTANCE_ADMIN,
    WORKSPACE_PARAMETER,
    declared_access,
    dependency_names,
)
from control_plane.api_document.constraints import WORKSPACE_SLUG
from control_plane.api_document.examples import BODY_EXAMPLES
from control_plane.auth import Role
from control_plane.errors import (
    ApiError,
    BadRequest,
    BodyTooLarge,
    Conflict,
    ErrorBody,
    Forbidden,
    NotFound,
    PreconditionRequired,
    TooManyAttempts,
    Unauthorized,
    ValidationFailed,
)
from control_plane.etag import ETAG_PATTERN
from control_plane.request_body import takes_body

ERRORS = "errors"  # the handler opt key the decorators' ``errors=`` lands in
ALSO_AS = "also_as"  # media types a success answer also comes in, with the same schema
IF_MATCH_DEPENDENCY = "if_match"
IF_MATCH_HEADER = "If-Match"
_HEADER_SCHEMAS = {"ETag": Schema(type=OpenAPIType.STRING, pattern=ETAG_PATTERN)}
_AUTHENTICATE = OpenAPIHeader(
    schema=Schema(type=OpenAPIType.STRING), description="`Bearer`: send an admin token"
)


def route_errors(route: HTTPRoute, handler: HTTPRouteHandler) -> list[type[ApiError]]:
    """Every error class the route can answer with, the common ones first."""
    access = declared_access(handler)
    if access is None:
        return []
    errors: list[type[ApiError]] = [ValidationFailed, Unauthorized, TooManyAttempts]
    if access is INSTANCE_ADMIN or (isinstance(access, Role) and access > Role.VIEWER):
        errors.append(Forbidden)
    if WORKSPACE_PARAMETER in route.path_parameters:
        errors.append(NotFound)
    if takes_body(handler):
        errors += [BadRequest, BodyTooLarge]
    if IF_MATCH_DEPENDENCY in dependency_names(handler):
        errors += [PreconditionRequired, Conflict]
    declared: Sequence[type[ApiError]] = handler.opt.get(ERRORS, ())
    return errors + [error for error in declared if error not in errors]


def error_responses(errors: Iterable[type[ApiError]]) -> dict[int, ResponseSpec]:
    """One response per status, its description naming the ``code`` values it carries."""
    codes: dict[int, list[str]] = {}
    for error in errors:
        codes.setdefault(error.status_code, []).extend(_codes(error))
    return {
        status: ResponseSpec(
            data_container=ErrorBody,
            generate_examples=False,
            description=f"{HTTPStatus(status).phrase}: `code` is "
            + " or ".join(f"`{code}`" for code in dict.fromkeys(names)),
        )
        for status, names in sorted(codes.items())
    }


def _codes(error: type[ApiError]) -> tuple[str, ...]:
    return (*getattr(error, "codes", ()), error.code) if error.code else ()


@dataclasses.dataclass(frozen=True)
class RouteDocument:
    """What ``DocumentedOperation`` adds to the operation Litestar built for one route."""

    success_headers: dict[str, OpenAPIHeader]
    body_example: Example | None
    if_match: bool
    also_as: tuple[str, ...]  # media types the success answer comes in besides JSON

    def apply(self, operation: Operation) -> None:
        for parameter in operation.parameters or []:
            if not isinstance(parameter, Parameter):
                continue
            if parameter.param_in == "header" and parameter.name == IF_MATCH_HEADER:
                parameter.required = self.if_match
                parameter.schema = Schema(type=OpenAPIType.STRING, pattern=ETAG_PATTERN)
            elif parameter.param_in == "path" and parameter.name == WORKSPACE_PARAMETER:
                parameter.schema = Schema(type=OpenAPIType.STRING, pattern=WORKSPACE_SLUG)
        body = operation.request_body
        if self.body_example is not None and isinstance(body, RequestBody):
            for media in body.content.values():
                media.examples = {"valid": self.body_example}
        for status, response in (operation.responses or {}).items():
            if isinstance(response, OpenAPIResponse) and status.startswith("2"):
                response.headers = {**(response.headers or {}), **self.success_headers}
                content = response.content or {}
                for media_type in self.also_as:
                    if "application/json" in content:
                        content[media_type] = content["application/json"]
            elif isinstance(response, OpenAPIResponse) and status == "401":
                response.headers = {"WWW-Authenticate": _AUTHENTICATE}


@dataclasses.dataclass
class DocumentedOperation(Operation):
    """Litestar's ``Operation``, completed with its route's ``RouteDocument``."""

    document: ClassVar[RouteDocument]

    def __post_init__(self) -> None:
        self.document.apply(self)


def _route_document(handler: HTTPRouteHandler) -> RouteDocument:
    example = None
    if takes_body(handler):
        body_type = handler.parsed_fn_signature.parameters["data"].annotation
        example = BODY_EXAMPLES.get(body_type)
        if example is None:
            raise ImproperlyConfiguredException(
                f"{handler.handler_name}: no example body for {body_type!r} "
                "(control_plane.api_document.examples.body_example)"
            )
    headers = {
        header.name: OpenAPIHeader(
            schema=_HEADER_SCHEMAS.get(header.name, Schema(type=OpenAPIType.STRING)),
            description=header.description,
        )
        for header in handler.resolve_response_headers()
        if header.documentation_only
    }
    return RouteDocument(
        success_headers=headers,
        body_example=example,
        if_match=IF_MATCH_DEPENDENCY in dependency_names(handler),
        also_as=tuple(handler.opt.get(ALSO_AS, ())),
    )


def document_routes(routes: Iterable[BaseRoute], under: str) -> None:
    """Complete the document of every admin route below ``under``: its error
    responses, ``If-Match``, success headers and body example."""
    for route in routes:
        if not (isinstance(route, HTTPRoute) and route.path.startswith(f"{under}/")):
            continue
        for handler in route.route_handlers:
            if handler.http_methods == {"OPTIONS"} or declared_access(handler) is None:
                continue
            declared = dict(handler.responses or {})
            handler.responses = {**error_responses(route_errors(route, handler)), **declared}
            document: Any = _route_document(handler)
            handler.operation_class = type(
                f"{handler.handler_name.title()}Operation",
                (DocumentedOperation,),
                {"document": document},
            )
