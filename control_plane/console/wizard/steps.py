"""The wizard's steps as forms: a draft's values shown in a step's fields, a posted
step applied to the draft, and each error of the spec placed next to its field.

Only the shape of a field is checked here (a number is a number, a line of
mappings is ``name = value``); whether the operation is valid is the operations
service's judgement when the draft is saved (``shared.engine.spec_validation``),
whose field errors ``place_errors`` puts beside the field they name.
"""

from __future__ import annotations

import copy
import json
from typing import Any, Final

from control_plane.console.forms import under, word_list
from control_plane.console.wizard.schema import ParamRow
from shared.engine.spec_validation import FieldError

STEPS: Final = ("request", "parameters", "response", "safety", "review")
STEP_TITLES: Final = {
    "request": "Request",
    "parameters": "Parameters",
    "response": "Response",
    "safety": "Safety",
    "review": "Review and publish",
}
METHODS: Final = ("GET", "POST", "PUT", "PATCH", "DELETE")
AUTH_TYPES: Final = ("none", "bearer", "header", "query", "basic")
CONFIRMATIONS: Final = ("auto", "true", "false")
MAX_LINES: Final = 100
_CHOOSE_SECRET: Final = "choose a secret of this workspace (Secrets page)"  # noqa: S105 - a message

# A spec field (prefix) -> the form field its errors are shown at, per step; first match wins.
_PLACES: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "request": (
        ("name", "name"),
        ("title", "title"),
        ("description", "description"),
        ("request.method", "method"),
        ("request.url", "url"),
        ("request.query", "query"),
        ("request.headers", "headers"),
        ("request.body", "body"),
        ("request.auth.name", "auth_name"),
        ("request.auth", "auth_secret"),
    ),
    "parameters": (("input", "extra"),),
    "response": (
        ("response.select", "select"),
        ("select", "select"),
        ("response.max_items", "max_items"),
        ("response.max_bytes", "max_bytes"),
        ("arguments", "arguments"),
        ("acknowledge_side_effects", "acknowledge"),
    ),
    "safety": (
        ("execution_config.idempotency.argument", "idempotency_argument"),
        ("execution_config.idempotency.header", "idempotency_header"),
        ("execution_config.idempotency", "idempotency_argument"),
        ("execution_config.timeout_ms", "timeout_ms"),
        ("execution_config.retries", "retries"),
        ("safety.confirmation", "confirmation"),
        ("safety.approval", "approval"),
        ("scopes", "scopes"),
    ),
}
_ROW_PLACES: Final = (
    ("pattern", "pattern"),
    ("enum", "enum"),
    ("minimum", "min"),
    ("minLength", "min"),
    ("minItems", "min"),
    ("maximum", "max"),
    ("maxLength", "max"),
    ("maxItems", "max"),
    ("type", "type"),
    ("description", "description"),
)


def _row_place(field: str, rows: list[ParamRow]) -> str | None:
    """The row field an ``input.properties.<name>...`` error belongs to."""
    for row in rows:
        base = f"input.properties.{row.name}"
        if not under(field, base):
            continue
        rest = field[len(base) + 1 :]
        for keyword, place in _ROW_PLACES:
            if rest.startswith(keyword):
                return f"{row.key}.{place}"
        return f"{row.key}.name"
    return None


def place_errors(
    step: str, errors: list[FieldError], rows: list[ParamRow] | None = None
) -> tuple[dict[str, str], list[FieldError]]:
    """Errors by the form field of ``step`` they belong to, and those of other steps."""
    placed: dict[str, str] = {}
    elsewhere: list[FieldError] = []
    for error in errors:
        place = _row_place(error.field, rows or []) if step == "parameters" else None
        if error.field == "input.required":  # names a path variable: said above the rows
            elsewhere.append(error)
            continue
        if place is None:
            place = next(
                (to for prefix, to in _PLACES.get(step, ()) if under(error.field, prefix)), None
            )
        if place is None:
            elsewhere.append(error)
        elif place in placed:
            placed[place] += "; " + error.message
        else:
            placed[place] = error.message
    return placed, elsewhere


_STEP_OF_FIELD: Final = (
    ("input", "parameters"),
    ("response", "response"),
    ("execution_config", "safety"),
    ("safety", "safety"),
    ("scopes", "safety"),
)


def step_of(field: str | None) -> str:
    """The step whose form edits a spec field (a lint finding's field links to it)."""
    return next((step for prefix, step in _STEP_OF_FIELD if under(field or "", prefix)), "request")


def form_values(form: Any, names: tuple[str, ...]) -> dict[str, str]:
    return {name: str(form.get(name, "")) for name in names}


# --- step 1: the request ---------------------------------------------------------------------

REQUEST_FIELDS: Final = (
    "name",
    "title",
    "description",
    "method",
    "url",
    "query",
    "headers",
    "body",
    "auth_type",
    "auth_secret",
    "auth_name",
)


def _auth_values(auth: Any) -> dict[str, str]:
    """The auth fields of a stored binding; ``keep`` when the form cannot show it."""
    if auth is None:
        return {"auth_type": "none", "auth_secret": "", "auth_name": ""}
    if (
        isinstance(auth, dict)
        and auth.get("secret")
        and auth.get("username") is None
        and auth.get("password") is None
    ):
        return {
            "auth_type": str(auth["type"]),
            "auth_secret": str(auth["secret"]),
            "auth_name": str(auth.get("name") or ""),
        }
    return {"auth_type": "keep", "auth_secret": "", "auth_name": ""}


def request_values(draft: dict[str, Any]) -> dict[str, str]:
    request = draft["request"]
    return {
        "name": draft["name"],
        "title": draft.get("title") or "",
        "description": draft["description"],
        "method": request["method"],
        "url": request["url"],
        "query": "\n".join(f"{k} = {v}" for k, v in (request.get("query") or {}).items()),
        "headers": "\n".join(f"{k}: {v}" for k, v in (request.get("headers") or {}).items()),
        "body": request.get("body") or "",
        **_auth_values(request.get("auth")),
    }


def _lines(text: str, separator: str, field: str, errors: dict[str, str]) -> dict[str, str] | None:
    """``name <separator> value`` per line; None when there are none."""
    found: dict[str, str] = {}
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if len(lines) > MAX_LINES:
        errors[field] = f"at most {MAX_LINES} lines"
        return None
    for number, line in enumerate(lines, start=1):
        name, sep, value = line.partition(separator)
        if not sep or not name.strip() or not value.strip():
            errors[field] = f"line {number}: write it as name {separator} value"
            return None
        if name.strip() in found:
            errors[field] = f"line {number}: {name.strip()!r} is given twice"
            return None
        found[name.strip()] = value.strip()
    return found or None


def apply_request(
    draft: dict[str, Any], values: dict[str, str], secret_names: list[str]
) -> tuple[dict[str, Any], dict[str, str]]:
    """The draft with step 1's fields, and the fields whose text is not even shaped right."""
    errors: dict[str, str] = {}
    spec = copy.deepcopy(draft)
    spec["title"] = values["title"].strip() or None
    spec["description"] = values["description"].strip()
    request = spec["request"]
    if values["method"] not in METHODS:
        errors["method"] = "choose one of " + ", ".join(METHODS)
    else:
        request["method"] = values["method"]
    request["url"] = values["url"].strip()
    request["query"] = _lines(values["query"], "=", "query", errors)
    request["headers"] = _lines(values["headers"], ":", "headers", errors)
    request["body"] = values["body"].strip() or None
    auth_type = values["auth_type"]
    if auth_type == "none":
        request["auth"] = None
    elif auth_type in AUTH_TYPES:
        if values["auth_secret"] not in secret_names:
            errors["auth_secret"] = _CHOOSE_SECRET
        name = values["auth_name"].strip() or None
        if auth_type in ("header", "query") and name is None:
            errors["auth_name"] = f"the {auth_type} name the secret is sent in"
        request["auth"] = {
            "type": auth_type,
            "secret": values["auth_secret"],
            "name": name if auth_type in ("header", "query") else None,
            "username": None,
            "password": None,
        }
    elif auth_type != "keep":
        errors["auth_type"] = "choose one of " + ", ".join(AUTH_TYPES)
    return spec, errors


# --- step 3: the response --------------------------------------------------------------------

RESPONSE_FIELDS: Final = ("select", "max_items", "max_bytes", "arguments", "acknowledge")


def response_values(draft: dict[str, Any]) -> dict[str, str]:
    response = draft["response"]
    return {
        "select": response.get("select") or "",
        "max_items": str(response["max_items"]),
        "max_bytes": str(response["max_bytes"]),
        "arguments": example_arguments(draft),
        "acknowledge": "",
    }


def example_arguments(draft: dict[str, Any]) -> str:
    """A start for the try-it's arguments: each required parameter with a sample value."""
    schema = draft.get("input") or {}
    properties = schema.get("properties") or {}
    samples: dict[str, Any] = {}
    for name in schema.get("required") or []:
        declaration = properties.get(name)
        if not isinstance(declaration, dict):
            continue
        enum = declaration.get("enum")
        kind = declaration.get("type")
        if isinstance(enum, list) and enum:
            samples[name] = enum[0]
        else:
            samples[name] = {"integer": 1, "number": 1.5, "boolean": True}.get(str(kind), "")
    return json.dumps(samples, indent=2)


def _set_integers(
    values: dict[str, str], fields: tuple[str, ...], target: dict[str, Any], errors: dict[str, str]
) -> None:
    """Each of ``fields`` as a whole number into ``target``; an error by field if not one."""
    for field in fields:
        try:
            target[field] = int(values[field].strip())
        except ValueError:
            errors[field] = "a whole number"


def apply_response(
    draft: dict[str, Any], values: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    errors: dict[str, str] = {}
    spec = copy.deepcopy(draft)
    response = spec["response"]
    response["select"] = values["select"].strip() or None
    _set_integers(values, ("max_items", "max_bytes"), response, errors)
    return spec, errors


def parse_arguments(text: str) -> tuple[dict[str, Any], str | None]:
    try:
        value = json.loads(text or "{}")
    except ValueError as exc:
        return {}, f"not JSON: {exc}"
    if not isinstance(value, dict):
        return {}, 'a JSON object of arguments, e.g. {"id": 1}'
    return value, None


# --- step 4: safety --------------------------------------------------------------------------

SAFETY_FIELDS: Final = (
    "idempotency_argument",
    "idempotency_header",
    "approval",
    "confirmation",
    "timeout_ms",
    "retries",
    "scopes",
)


def safety_values(draft: dict[str, Any]) -> dict[str, str]:
    execution = draft["execution_config"]
    idempotency = execution.get("idempotency") or {}
    confirmation = draft["safety"]["confirmation"]
    return {
        "idempotency_argument": idempotency.get("argument", ""),
        "idempotency_header": idempotency.get("header", "Idempotency-Key"),
        "approval": "on" if draft["safety"]["approval"] else "",
        "confirmation": confirmation
        if isinstance(confirmation, str)
        else str(confirmation).lower(),
        "timeout_ms": str(execution["timeout_ms"]),
        "retries": str(execution["retries"]),
        "scopes": " ".join(draft.get("scopes") or []),
    }


def apply_safety(
    draft: dict[str, Any], values: dict[str, str]
) -> tuple[dict[str, Any], dict[str, str]]:
    errors: dict[str, str] = {}
    spec = copy.deepcopy(draft)
    execution = spec["execution_config"]
    argument = values["idempotency_argument"].strip()
    header = values["idempotency_header"].strip() or "Idempotency-Key"
    execution["idempotency"] = {"argument": argument, "header": header} if argument else None
    _set_integers(values, ("timeout_ms", "retries"), execution, errors)
    spec["safety"]["approval"] = values["approval"] == "on"
    spec["scopes"] = word_list(values["scopes"])
    confirmation = values["confirmation"]
    if confirmation not in CONFIRMATIONS:
        errors["confirmation"] = "choose auto, true or false"
    else:
        spec["safety"]["confirmation"] = (
            "auto" if confirmation == "auto" else confirmation == "true"
        )
    return spec, errors
