"""Console forms: reading a posted form, and a service's refusal as messages by field.

Pages call the services with what the form holds and let the services judge it
(the same rules as the admin API); a ``ValidationFailed`` becomes a message
next to each field it names, a stale ``If-Match`` the "changed by someone
else" notice (docs/architecture.md, "The console").
"""

from __future__ import annotations

import re
from collections.abc import Collection
from typing import Any

from litestar import Request
from litestar.datastructures import FormMultiDict

from control_plane.errors import ApiError, Conflict
from control_plane.etag import Precondition, parse_if_match

ETAG_FIELD = "etag"  # the hidden field that carries the ETag the page was rendered with
STALE_MESSAGE = (
    "Someone else changed this since you opened the page. Reload it to see the current "
    "state, then make your change again."
)
_INDEX = re.compile(r"\[\d+\].*$|\..*$")
_SEPARATORS = re.compile(r"[\s,]+")


async def read_form(request: Request[Any, Any, Any]) -> FormMultiDict:
    """The posted form (admission has read and bounded the body already)."""
    return await request.form()


def text(form: FormMultiDict, name: str) -> str:
    value = form.get(name, "")
    return value.strip() if isinstance(value, str) else ""


def values(form: FormMultiDict, name: str) -> list[str]:
    return [value for value in form.getall(name, []) if isinstance(value, str)]


def expected_revision(etag_text: str) -> Precondition:
    """The revision a page's ETag field names; 428 when it is empty, as the API answers."""
    return parse_if_match(etag_text.strip() or None)


def precondition(form: FormMultiDict) -> Precondition:
    """What the page was rendered with (its ETag field)."""
    return expected_revision(text(form, ETAG_FIELD))


def field_errors(exc: ApiError) -> dict[str, str]:
    """Messages by form field: ``operations[2]`` and ``rate_limit.requests`` go to
    ``operations`` and ``rate_limit``; an error of no field goes to ``""``."""
    found: dict[str, str] = {}
    for error in exc.errors:
        field = _INDEX.sub("", error.field)
        found[field] = f"{found[field]} {error.message}" if field in found else error.message
    if not found:
        found[""] = exc.message
    return found


def errors_at(exc: ApiError, fields: Collection[str]) -> dict[str, str]:
    """Messages by form field for a form whose fields name nested paths
    (``auth.scopes``, ``introspection.client_id``): an error goes to the longest of
    ``fields`` its path starts with (``auth.scopes[1]`` to ``auth.scopes``); one no
    field shows goes to ``""`` with its path, so nothing refused is left unsaid."""
    found: dict[str, str] = {}
    for error in exc.errors:
        place = max((f for f in fields if under(error.field, f)), key=len, default="")
        message = error.message if place else f"{error.field}: {error.message}"
        found[place] = f"{found[place]} {message}" if place in found else message
    if not found:
        found[""] = exc.message
    return found


def under(path: str, field: str) -> bool:
    """Whether the spec path ``path`` is ``field`` or inside it (``field.x``, ``field[0]``)."""
    return path == field or path.startswith((field + ".", field + "["))


def word_list(raw: str) -> list[str]:
    """A list typed as words separated by spaces or commas (scopes); blanks do not count."""
    return [word for word in _SEPARATORS.split(raw) if word]


def is_stale(exc: ApiError) -> bool:
    return isinstance(exc, Conflict) and exc.code == "stale_revision"
