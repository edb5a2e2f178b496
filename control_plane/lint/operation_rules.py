# ruff: noqa: SIM905 - word lists read best as text
"""The rules about one operation: its name, description, input schema, response and safety.

Every rule reads the spec defensively: the linter also runs on specs that
failed validation (``crank lint``), so a schema node may be anything.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterator
from typing import Any, Final

import jmespath.exceptions

from control_plane.lint.findings import (
    MAX_LIST_ITEMS_ADVISED,
    Finding,
    finding,
    operation_resource,
)
from control_plane.lint.text import (
    first_sentence,
    is_russian,
    is_vague,
    says_when,
    starts_with_action,
    words,
)
from shared.engine.credentials import static_credentials
from shared.engine.jmes import root_fields
from shared.engine.spec import OperationSpec
from shared.engine.spec_memo import memoized_by_spec
from shared.engine.spec_validation import schema_pattern_errors

# --- names ---------------------------------------------------------------------------

_NAME_TOKEN: Final = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_SNAKE_CASE: Final = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
# Words that name no task: a name made only of these is generic.
_GENERIC_NAME_WORDS: Final = frozenset(
    """
    api apis call calls execute exec executor run runner invoke do perform process processor
    handle handler manage manager make send request requests req endpoint action actions
    operation operations tool tools function func fn method generic data http https rest
    query command cmd proxy gateway raw any misc helper util utils service crud universal
    general all stuff thing things main default dispatch dispatcher router route
    """.split()
)
# Leading words that make a name multi-action, whatever the object: manage_user.
_UMBRELLA_NAME_VERBS: Final = frozenset({"manage", "handle", "crud", "administer"})

# --- parameters ----------------------------------------------------------------------

_MULTI_ACTION_PARAMS: Final = frozenset(
    {
        "action",
        "actions",
        "operation",
        "op",
        "mode",
        "command",
        "cmd",
        "verb",
        "method",
        "action_type",
        "operation_type",
        "op_type",
    }
)
_LITERAL_ALTERNATION: Final = re.compile(
    r"\^?\((?:\?:)?[\w-]+(?:\|[\w-]+)+\)\$?|\^?[\w-]+(?:\|[\w-]+)+\$?"
)
_VALUE_SET_WORDS: Final = re.compile(
    r"\b(one of|either|possible values|allowed values|valid values|accepted values)\b"
    r"|(?<!\w)(одно из|один из|одна из|возможные значения|допустимые значения|либо)(?!\w)"
)
_QUOTED_LIST: Final = re.compile(
    r"[`'\"][\w-]{1,30}[`'\"]\s*(?:,|/|\||\bor\b|или)\s*[`'\"][\w-]{1,30}[`'\"]"
)
_STRUCTURE_KEYWORDS: Final = (
    "properties",
    "patternProperties",
    "$ref",
    "oneOf",
    "anyOf",
    "allOf",
    "const",
    "enum",
)
_TYPE_KEYWORDS: Final = ("type", "enum", "const", "$ref", "oneOf", "anyOf", "allOf", "not")
_TOP_LEVEL_COMBINATORS: Final = ("oneOf", "anyOf", "allOf")

# --- responses -----------------------------------------------------------------------

_LIST_NAME_VERBS: Final = frozenset({"list", "search", "find", "browse", "query"})
_ITEM_PROJECTION: Final = re.compile(r"\[[^\]]*\]\s*\.|\bmap\s*\(")
_ARRAY_IN_SELECT: Final = re.compile(r"\[\s*(\*|\?[^\]]*)?\s*\]")


def name_tokens(name: str) -> list[str]:
    """A tool name's words, lowercased: snake_case, camelCase and digits split apart."""
    return [token.lower() for token in _NAME_TOKEN.findall(name)]


def _check_name(spec: OperationSpec, resource: str) -> Iterator[Finding]:
    tokens = name_tokens(spec.name)
    meaningful = [t for t in tokens if len(t) > 1 and not t.isdigit()]
    if not meaningful or all(t in _GENERIC_NAME_WORDS for t in meaningful):
        yield finding(
            "name-generic",
            resource,
            "name",
            f"{spec.name!r} does not say which task the tool does; the model has to guess",
        )
    elif meaningful[0] in _UMBRELLA_NAME_VERBS:
        yield finding(
            "name-generic",
            resource,
            "name",
            f"{spec.name!r} starts with {meaningful[0]!r}, which covers several actions",
            f"Make one tool per action, e.g. get_{'_'.join(meaningful[1:]) or 'x'} and "
            f"update_{'_'.join(meaningful[1:]) or 'x'}.",
        )
    if not _SNAKE_CASE.fullmatch(spec.name):
        suggestion = "_".join(tokens)
        yield finding(
            "name-style",
            resource,
            "name",
            f"{spec.name!r} is not lowercase snake_case",
            f"Rename it to {suggestion!r}." if suggestion else None,
        )


# Hints for a description in Russian: the output stays in English (no Russian text in an
# English hint), and says the fix belongs in the description's own language.
_IN_ITS_LANGUAGE: Final = {
    "description-action": "Begin with a verb in the description's language (Russian: the "
    "third person, as for 'Gets ...' or 'Creates ...').",
    "description-when": "Add a sentence in the description's language that says when to use "
    "the tool (Russian for 'Use when ...').",
}


def _check_description(spec: OperationSpec, resource: str) -> Iterator[Finding]:
    description = spec.description
    if not description.strip():
        return  # validation refuses an empty description
    sentence = first_sentence(description)
    if is_vague(description):
        yield finding(
            "description-vague",
            resource,
            "description",
            f"{sentence!r} does not say what the tool does to what",
        )
        return  # the other description rules would only repeat it
    if not starts_with_action(description):
        yield finding(
            "description-action",
            resource,
            "description",
            f"the description does not begin with an action: {sentence!r}",
            _IN_ITS_LANGUAGE["description-action"] if is_russian(description) else None,
        )
    if not says_when(description):
        yield finding(
            "description-when",
            resource,
            "description",
            "the description does not say when to use the tool",
            _IN_ITS_LANGUAGE["description-when"] if is_russian(description) else None,
        )


def _resolve(root: dict[str, Any], node: Any) -> Any:
    """A local ``$ref`` one level deep (validation has checked it resolves)."""
    if not isinstance(node, dict) or not isinstance(node.get("$ref"), str):
        return node
    ref: str = node["$ref"]
    if not ref.startswith("#/"):
        return node
    target: Any = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(target, dict) or part not in target:
            return node
        target = target[part]
    if not isinstance(target, dict):
        return node
    return {**target, **{key: value for key, value in node.items() if key != "$ref"}}


def _properties(
    root: dict[str, Any], schema: Any, where: str, depth: int = 0
) -> Iterator[tuple[str, Any, str]]:
    """(name, declaration, field) of every property, nested objects and array items too."""
    if depth > 8 or not isinstance(schema, dict):
        return
    properties = schema.get("properties")
    if isinstance(properties, dict):
        for name, declaration in properties.items():
            field = f"{where}.properties.{name}"
            yield name, declaration, field
            resolved = _resolve(root, declaration)
            yield from _properties(root, resolved, field, depth + 1)
            if isinstance(resolved, dict):
                items = _resolve(root, resolved.get("items"))
                yield from _properties(root, items, f"{field}.items", depth + 1)


def _types(declaration: dict[str, Any]) -> set[str]:
    kind = declaration.get("type")
    if isinstance(kind, str):
        return {kind}
    if isinstance(kind, list):
        return {k for k in kind if isinstance(k, str)}
    return set()


def _enum_like(declaration: dict[str, Any]) -> bool:
    if "enum" in declaration or "const" in declaration or "string" not in _types(declaration):
        return False
    pattern = declaration.get("pattern")
    if isinstance(pattern, str) and _LITERAL_ALTERNATION.fullmatch(pattern):
        return True
    description = declaration.get("description")
    if not isinstance(description, str):
        return False
    lowered = description.lower()
    return bool(_VALUE_SET_WORDS.search(lowered) or _QUOTED_LIST.search(description))


def _check_parameter(
    root: dict[str, Any], name: str, raw: Any, field: str, resource: str, *, top: bool
) -> Iterator[Finding]:
    declaration = _resolve(root, raw)
    if not isinstance(declaration, dict) or not any(k in declaration for k in _TYPE_KEYWORDS):
        yield finding("param-type-missing", resource, field, f"parameter {name!r} has no type")
        if not isinstance(declaration, dict):
            return
    description = declaration.get("description")
    if not isinstance(description, str) or not description.strip():
        yield finding(
            "param-description", resource, field, f"parameter {name!r} has no description"
        )
    if _enum_like(declaration):
        yield finding(
            "param-enum",
            resource,
            field,
            f"parameter {name!r} takes one of a few values but declares no enum",
        )
    if top and name.lower() in _MULTI_ACTION_PARAMS:
        yield finding(
            "param-multi-action",
            resource,
            field,
            f"parameter {name!r} picks what the endpoint does: one tool does several jobs",
        )
    additional = declaration.get("additionalProperties")
    if (
        "object" in _types(declaration)
        and not any(k in declaration for k in _STRUCTURE_KEYWORDS)
        and not isinstance(additional, dict)
    ):
        yield finding(
            "param-untyped-object",
            resource,
            field,
            f"parameter {name!r} is an object of any shape; the model has to guess its fields",
        )


def _check_input(spec: OperationSpec, resource: str) -> Iterator[Finding]:
    schema = spec.input
    for keyword in _TOP_LEVEL_COMBINATORS:
        if keyword in schema:
            yield finding(
                "input-top-level-combinator",
                resource,
                f"input.{keyword}",
                f"the input schema has {keyword} at its root, which several LLM APIs refuse",
            )
    for name, declaration, field in _properties(schema, schema, "input"):
        if name.startswith("_crank_"):
            continue
        top = field == f"input.properties.{name}"
        yield from _check_parameter(schema, name, declaration, field, resource, top=top)


def _check_patterns(spec: OperationSpec, resource: str) -> Iterator[Finding]:
    """Schema regexes RE2 refuses: the write-time check's own errors, as findings."""
    schemas = [(spec.input, "input"), (spec.response.output_schema, "response.output_schema")]
    for schema, where in schemas:
        for error in schema_pattern_errors(schema, where):
            yield finding("pattern-unsupported", resource, error.field, error.message)


def _mappings(spec: OperationSpec) -> Iterator[tuple[str, Any]]:
    """(field, expression) of every JMESPath over the arguments: query values and body."""
    for parameter, expression in (spec.request.query or {}).items():
        yield f"request.query.{parameter}", expression
    if spec.request.body is not None:
        yield "request.body", spec.request.body


def _check_mappings(spec: OperationSpec, resource: str) -> Iterator[Finding]:
    """An argument a mapping reads but the input schema does not declare is never sent
    by the model: always null when the schema forbids other properties (an error: the
    query parameter or body is never sent), a likely typo otherwise (a warning)."""
    schema = spec.input
    properties = schema.get("properties")
    if not isinstance(properties, dict) or any(
        keyword in schema for keyword in (*_TOP_LEVEL_COMBINATORS, "$ref", "patternProperties")
    ):
        return  # where the arguments are declared is not plain to see
    forbidden = schema.get("additionalProperties") is False
    for field, expression in _mappings(spec):
        try:
            names = root_fields(expression) if isinstance(expression, str) else set()
        except jmespath.exceptions.JMESPathError:
            continue  # validation reports the expression itself
        for name in sorted(names - properties.keys()):
            close = difflib.get_close_matches(name, list(properties), n=1)
            hint = f"Did you mean {close[0]!r}?" if close else None
            yield finding(
                "request-argument-unknown" if forbidden else "request-argument-undeclared",
                resource,
                field,
                f"{expression!r} reads argument {name!r}, which the input schema "
                + ("does not allow" if forbidden else "does not declare"),
                hint,
            )


def is_list_endpoint(spec: OperationSpec) -> bool:
    tokens = name_tokens(spec.name)
    if tokens and tokens[0] in _LIST_NAME_VERBS:
        return True
    if len(tokens) > 1 and tokens[1] in _LIST_NAME_VERBS:  # sales_list_orders
        return True
    first = words(spec.description)[:1]
    if first and first[0] in ("lists", "searches", "finds"):
        return True
    select = spec.response.select
    return select is not None and bool(_ARRAY_IN_SELECT.search(select))


def _check_response(spec: OperationSpec, resource: str) -> Iterator[Finding]:
    response = spec.response
    if response.select is None:
        yield finding(
            "response-select",
            resource,
            "response.select",
            "no response.select: the whole upstream answer goes to the model",
        )
    if not is_list_endpoint(spec):
        return
    if response.max_items > MAX_LIST_ITEMS_ADVISED:
        yield finding(
            "response-array-cap",
            resource,
            "response.max_items",
            f"a list endpoint may return {response.max_items} items; "
            f"more than {MAX_LIST_ITEMS_ADVISED} floods the model's context",
        )
    if response.select is not None and not _ITEM_PROJECTION.search(response.select):
        yield finding(
            "response-array-fields",
            resource,
            "response.select",
            "a list endpoint returns each item whole; keep only the fields the next step needs",
        )


def _check_safety(spec: OperationSpec, resource: str) -> Iterator[Finding]:
    method = spec.request.method
    if method in ("POST", "PATCH") and spec.execution_config.idempotency is None:
        yield finding(
            "idempotency-missing",
            resource,
            "execution_config.idempotency",
            f"a {method} without an idempotency key may be repeated after a timeout and "
            "create a duplicate",
        )
    if method == "DELETE" and spec.safety.confirmation is False:
        yield finding(
            "delete-confirmation",
            resource,
            "safety.confirmation",
            "DELETE always needs two-step confirmation; it cannot be switched off",
        )


def _check_credentials(spec: OperationSpec, resource: str) -> Iterator[Finding]:
    """The write-time check's own detector, so lint and validation agree (and
    ``check_and_lint_file`` reports each field once, as this rule)."""
    for found in static_credentials(spec):
        yield finding("static-credential", resource, found.field, found.message)


@memoized_by_spec  # a pure function of the spec
def lint_operation(spec: OperationSpec) -> list[Finding]:
    """Every finding about one operation, in rule-table order per part of the spec."""
    resource = operation_resource(spec.name)
    return [
        *_check_name(spec, resource),
        *_check_description(spec, resource),
        *_check_input(spec, resource),
        *_check_patterns(spec, resource),
        *_check_mappings(spec, resource),
        *_check_response(spec, resource),
        *_check_safety(spec, resource),
        *_check_credentials(spec, resource),
    ]
