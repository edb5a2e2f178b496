"""The JSON body of an admin route: read only once access is settled, bounded
per route, decoded once and checked (docs/architecture.md, "Request admission").

Each route's body has a byte limit, named by the handler's ``body_limit=``
(``ORDINARY`` when it says nothing):

- ``ORDINARY``: ``CRANK_MAX_BODY_BYTES`` (1 MiB), every JSON route;
- ``DOCUMENT``: ``CRANK_MAX_DOCUMENT_BYTES`` (32 MiB), a whole operation file
  or OpenAPI document; only editor routes may declare it
  (``control_plane.access.check_declared_access``).

An announced ``Content-Length`` over the limit is refused before a byte is
read; a chunked body is counted while it streams and cut at the limit. Both
are ``413 body_too_large`` naming the limit and the setting that raises it.

Before a large body is decoded into Python values, its values are counted
without allocating them (``most_values``), so a few megabytes of ``[{},{},…]``
cannot turn into gigabytes of dictionaries. The decoded body is handed to
Litestar's own cache, so the handler's ``data`` is not read or decoded again.
"""

from __future__ import annotations

import asyncio
import re
from enum import Enum
from typing import Any

import msgspec
from litestar import Request
from litestar.handlers import BaseRouteHandler
from litestar.serialization import decode_json
from litestar.utils.scope.state import ScopeState

from control_plane.errors import BadRequest, BodyTooLarge, ValidationFailed
from control_plane.request_checks import MAX_JSON_DEPTH, MAX_JSON_VALUES, json_problem
from shared.engine.spec_validation import FieldError
from shared.settings import Settings

BODY_LIMIT = "body_limit"  # the handler opt key the decorators' ``body_limit=`` lands in
# Bodies larger than this are decoded and checked in a worker thread, off the event loop.
_THREAD_FROM_BYTES = 256 * 1024
# A JSON string, escapes included; linear on text msgspec has already accepted as JSON.
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_RAW = msgspec.json.Decoder(msgspec.Raw)


class BodyLimit(Enum):
    """Which setting bounds a route's body; the value is the Settings field."""

    ORDINARY = "max_body_bytes"
    DOCUMENT = "max_document_bytes"

    def bytes(self, settings: Settings) -> int:
        limit: int = getattr(settings, self.value)
        return limit

    @property
    def setting(self) -> str:
        return f"CRANK_{self.value.upper()}"


def body_limit(handler: BaseRouteHandler) -> BodyLimit:
    value = handler.opt.get(BODY_LIMIT)
    return value if isinstance(value, BodyLimit) else BodyLimit.ORDINARY


def takes_body(handler: BaseRouteHandler) -> bool:
    """The handler reads the request body (Litestar's ``data`` or ``body`` parameter)."""
    parameters = handler.parsed_fn_signature.parameters
    return "data" in parameters or "body" in parameters


async def read_body(request: Request[Any, Any, Any], limit: int, setting: str) -> bytes:
    """The whole body, refused (413) as soon as it is known to be over ``limit`` bytes."""
    announced = request.headers.get("content-length")
    if announced is not None and announced.strip().isdigit() and int(announced) > limit:
        raise BodyTooLarge(limit, setting)
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":  # a cut body could still parse: never use it
            raise BadRequest("the client went away before the whole body arrived")
        chunk: bytes = message.get("body", b"")  # type: ignore[assignment]
        size += len(chunk)
        if size > limit:
            raise BodyTooLarge(limit, setting)
        chunks.append(chunk)
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def most_values(raw: bytes) -> int:
    """An upper bound on the values a JSON text holds, counted without decoding it.

    Every value but the first of a container follows a comma, so values ≤
    commas + containers + 1 once strings (whose commas and brackets are text)
    are blanked out. ``raw`` must already be valid JSON."""
    if len(raw) <= MAX_JSON_VALUES:
        return len(raw)  # every value takes at least one byte: no need to count
    bare = _STRING.sub(b'""', raw)
    return bare.count(b",") + bare.count(b"[") + bare.count(b"{") + 1


def _decode_checked(raw: bytes, request: Request[Any, Any, Any]) -> Any:
    """The decoded body; raises ValidationFailed (400) or BadRequest (not JSON)."""
    try:
        _RAW.decode(raw)  # syntax and nesting checked, nothing allocated
    except RecursionError:
        raise ValidationFailed(
            [FieldError("", f"the JSON body is nested more than {MAX_JSON_DEPTH} levels deep")]
        ) from None
    except msgspec.DecodeError as exc:
        # Refused here: decoding it for real would build its valid prefix first.
        raise BadRequest(f"the body is not valid JSON: {exc}") from None
    if most_values(raw) > MAX_JSON_VALUES:
        raise ValidationFailed(
            [FieldError("", f"the JSON body holds more than {MAX_JSON_VALUES} values")]
        )
    document = decode_json(raw, type_decoders=request.route_handler.resolve_type_decoders())
    problem = json_problem(document)
    if problem is not None:
        raise ValidationFailed([problem])
    return document


async def load_body(request: Request[Any, Any, Any], settings: Settings) -> None:
    """Read, bound and check the body, and leave it where the handler's ``data`` finds it."""
    limit = body_limit(request.route_handler)
    raw = await read_body(request, limit.bytes(settings), limit.setting)
    state = ScopeState.from_scope(request.scope)  # Litestar's per-request body cache
    state.body = raw
    if not raw:
        return
    if len(raw) > _THREAD_FROM_BYTES:
        state.json = await asyncio.to_thread(_decode_checked, raw, request)
    else:
        state.json = _decode_checked(raw, request)
