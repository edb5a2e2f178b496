"""What the console's filtered lists share (approvals, call log, audit log).

A list page is a GET form and a table: htmx sends the form and swaps in the
fragment (the form, its field errors and the results), pushing the URL, so a
filtered page is a link; without JavaScript the same URL renders the whole
page. Field errors come from the services' ``ValidationFailed``; a plain
request gets them with 400, an htmx one with 200 (htmx swaps no 4xx answer).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar
from urllib.parse import urlencode

from litestar import Request
from litestar.response import Template

from control_plane.auth import Workspace
from control_plane.console.forms import field_errors
from control_plane.console.rendering import page, wants_fragment
from control_plane.errors import ValidationFailed
from shared.engine.spec_validation import FieldError

PAGE_SIZE = 50


class Paged(Protocol):
    """One page of a service's list: its rows and the cursor of the next page."""

    @property
    def next_cursor(self) -> str | None: ...


PageT = TypeVar("PageT", bound=Paged)


def blank_to_none(value: str) -> str | None:
    value = value.strip()
    return value or None


def parse_time(field: str, text: str) -> datetime | None:
    """A form's date and time (``<input type="datetime-local">`` sends no offset: UTC);
    ValidationFailed naming ``field`` when it is not one."""
    text = text.strip()
    if not text:
        return None
    try:
        moment = datetime.fromisoformat(text) if len(text) <= 40 else None
    except ValueError:
        moment = None
    if moment is None:
        raise ValidationFailed([FieldError(field, "a date and time, e.g. 2026-12-01T09:30")])
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def list_url(path: str, form: dict[str, str], cursor: str | None = None) -> str:
    """``path`` with the form's non-empty fields (and a cursor) as its query."""
    query = {name: value for name, value in form.items() if value}
    if cursor:
        query["cursor"] = cursor
    return f"{path}?{urlencode(query)}" if query else path


def pushed_url(fragment: bool, url: str) -> dict[str, str]:
    """The URL htmx pushes for a fragment: the filters in use, not every empty field."""
    return {"HX-Push-Url": url} if fragment else {}


def when(moment: datetime | None) -> str:
    """A time as the console shows it: UTC, to the second."""
    if moment is None:
        return ""
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def pretty_json(value: Any) -> str:
    """JSON indented for reading (arguments, results, audit details)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


# Put in every list page's context, for the templates.
HELPERS: dict[str, Any] = {"when": when, "pretty_json": pretty_json}


async def list_page(
    request: Request[Any, Any, Any],
    ws: Workspace,
    name: str,
    form: dict[str, str],
    cursor: str,
    load: Callable[[str | None], Awaitable[PageT]],
    **context: Any,
) -> Template:
    """The list page ``name`` (``/ui/w/{ws}/{name}``, templates ``{name}.html`` and its
    fragment ``_{name}.html``): ``load`` reads the page at a cursor, raising
    ``ValidationFailed`` for filters the service refuses, which are shown by field."""
    result: PageT | None = None
    errors: dict[str, str] = {}
    try:
        result = await load(blank_to_none(cursor))
    except ValidationFailed as exc:
        errors = field_errors(exc)
    fragment = wants_fragment(request)
    path = f"/ui/w/{ws.slug}/{name}"
    return page(
        request,
        f"_{name}.html" if fragment else f"{name}.html",
        status_code=400 if errors and not fragment else 200,
        headers=pushed_url(fragment, list_url(path, form, blank_to_none(cursor))),
        form=form,
        errors=errors,
        result=result,
        path=path,
        first_url=list_url(path, form),
        next_url=list_url(path, form, result.next_cursor) if result and result.next_cursor else "",
        paged=bool(cursor),
        **context,
        **HELPERS,
    )
