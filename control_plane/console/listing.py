"""What the console's filtered lists share (approvals, call log, audit log).

A list page is a GET form and a table: htmx sends the form and swaps in the
fragment (the form, its field errors and the results), pushing the URL, so a
filtered page is a link; without JavaScript the same URL renders the whole
page. Field errors come from the services' ``ValidationFailed``; a plain
request gets them with 400, an htmx one with 200 (htmx swaps no 4xx answer).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

from litestar import Request

from control_plane.console.rendering import is_htmx
from control_plane.errors import ValidationFailed
from shared.engine.spec_validation import FieldError


def wants_fragment(request: Request[Any, Any, Any]) -> bool:
    """An htmx swap; a history restore (back button, nothing cached) needs the whole page."""
    return is_htmx(request) and request.headers.get("hx-history-restore-request") != "true"


def blank_to_none(value: str) -> str | None:
    value = value.strip()
    return value or None


def field_errors(exc: ValidationFailed) -> dict[str, str]:
    """The first message per form field (the services name the API's parameters, which
    the forms' fields share)."""
    errors: dict[str, str] = {}
    for problem in exc.errors:
        errors.setdefault(problem.field, problem.message)
    return errors


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
