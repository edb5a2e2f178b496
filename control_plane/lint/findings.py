"""The linter's findings and its rule table: every rule, its id and severity, in one place.

Rule ids are stable: CI scripts and the UI match on them. ``error`` blocks a
publish (and ``crank apply``); ``warning`` is reported and publishing goes on.
Errors are kept to what the tool-design seed clearly forbids or what breaks
real LLM clients; everything that rests on judgement or on a word-list
heuristic is a warning. docs/lint.md documents each rule.

========================== ======== ================================================
id                         severity what it catches
========================== ======== ================================================
name-generic               error    call_api, manage_user, execute_request and kin
name-style                 warning  not lowercase snake_case
description-vague          error    "Handles data.", "Обрабатывает данные."
description-action         warning  does not begin with an action
description-when           warning  does not say when to use the tool
param-description          warning  a parameter without a description
param-enum                 warning  a small value set that is not an enum
param-multi-action         warning  an action/operation/mode parameter
param-untyped-object       warning  a free-form ``object`` parameter
param-type-missing         warning  a parameter with no type at all
input-top-level-combinator error    oneOf/anyOf/allOf at the root of the input
pattern-unsupported        error    a schema regex RE2 cannot compile (backreference...)
request-argument-unknown   error    query/body reads an argument the schema forbids
request-argument-undeclared warning query/body reads an argument the schema does not declare
response-select            warning  the whole upstream body goes to the model
response-array-cap         warning  a list endpoint with max_items above 100
response-array-fields      warning  a list endpoint that keeps every item field
idempotency-missing        warning  POST/PATCH without an idempotency key
delete-confirmation        error    DELETE with confirmation switched off
static-credential          error    a credential in a static header or query value
agent-too-many-tools       warning  more than 20 tools on one agent
agent-tool-limit           error    more than 128 tools (clients refuse the list)
agent-similar-tools        warning  near-identical tool names or descriptions
spec-invalid               error    the spec fails write-time validation
========================== ======== ================================================
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Literal, NamedTuple

import msgspec

from shared.engine.spec_validation import FieldError

Severity = Literal["error", "warning"]


class Rule(NamedTuple):
    """One row of ``RULES``; ``id`` is stable (CI scripts and the UI match on it)."""

    id: str
    severity: Severity
    summary: str
    hint: str  # the default fix; a finding may give a more specific one


class Finding(msgspec.Struct, kw_only=True, frozen=True):
    """One problem the linter found; an ``error`` blocks a publish, a ``warning`` does not."""

    rule: str  # a stable id from RULES
    severity: Severity
    resource: str  # "operation:NAME" or "agent:SLUG"
    field: str | None  # a path inside the resource, e.g. "input.properties.action"
    message: str
    hint: str


MAX_TOOLS_ADVISED: Final = 20
MAX_TOOLS_ACCEPTED: Final = 128  # OpenAI's API refuses a request with more tools
MAX_LIST_ITEMS_ADVISED: Final = 100

_RULES: Final = (
    Rule(
        "name-generic",
        "error",
        "The tool name is specific, not call_api, manage_user, execute_request.",
        "Name the one task the tool does as verb_object, e.g. get_customer_by_email.",
    ),
    Rule(
        "name-style",
        "warning",
        "The tool name is lowercase snake_case.",
        "Use lowercase words joined by underscores, e.g. create_support_ticket.",
    ),
    Rule(
        "description-vague",
        "error",
        "The description names a concrete action, not 'Handles data.'.",
        "Start with what the tool does to what, e.g. 'Gets a customer's card by email.', "
        "then say when to use it and what it returns.",
    ),
    Rule(
        "description-action",
        "warning",
        "The description begins with an action.",
        "Begin with a verb: 'Gets ...', 'Creates ...'.",
    ),
    Rule(
        "description-when",
        "warning",
        "The description says when to use the tool.",
        "Add a sentence like 'Use when the user asks ...'.",
    ),
    Rule(
        "param-description",
        "warning",
        "Every parameter has a description.",
        "Say what the value means and give an example, e.g. 'Order id, e.g. ord_123'.",
    ),
    Rule(
        "param-enum",
        "warning",
        "A parameter that takes one of a few values declares them as an enum.",
        "List the allowed values in 'enum' so the model cannot invent others.",
    ),
    Rule(
        "param-multi-action",
        "warning",
        "No action/operation/mode parameter: a multi-action endpoint is split.",
        "Make one tool per action (create_x, cancel_x, ...), each with its own parameters.",
    ),
    Rule(
        "param-untyped-object",
        "warning",
        "No free-form object parameters.",
        "Declare the object's 'properties' (and 'additionalProperties: false'), or flatten "
        "the fields into parameters.",
    ),
    Rule(
        "param-type-missing",
        "warning",
        "Every parameter has a type.",
        "Give the parameter a 'type' (string, integer, number, boolean, array, object).",
    ),
    Rule(
        "input-top-level-combinator",
        "error",
        "The input schema has no oneOf/anyOf/allOf at its root.",
        "Several LLM APIs refuse such a tool: make one tool per variant, or move the "
        "alternatives into a property.",
    ),
    Rule(
        "pattern-unsupported",
        "error",
        "Every schema regex compiles in RE2, the linear-time engine Crank runs them on.",
        "Rewrite the pattern without backreferences, lookahead or lookbehind (RE2 syntax; "
        "\\uXXXX escapes are accepted), or drop it and describe the format instead.",
    ),
    Rule(
        "request-argument-unknown",
        "error",
        "request.query and request.body read only arguments the input schema declares.",
        "Name a property of the input schema (a typo is the usual cause), or declare the "
        "argument in input.properties.",
    ),
    Rule(
        "request-argument-undeclared",
        "warning",
        "request.query and request.body read only arguments the input schema declares.",
        "Declare the argument in input.properties (the model only sends what it is shown), "
        "or fix the name.",
    ),
    Rule(
        "response-select",
        "warning",
        "The response is selected, not passed whole to the model.",
        "Set response.select to a JMESPath that keeps only what the next step needs.",
    ),
    Rule(
        "response-array-cap",
        "warning",
        f"A list endpoint caps its array at {MAX_LIST_ITEMS_ADVISED} items or fewer.",
        "Lower response.max_items (e.g. 20) and let the model narrow the query instead.",
    ),
    Rule(
        "response-array-fields",
        "warning",
        "A list endpoint keeps only the important fields of each item.",
        "Project the items in response.select, e.g. 'orders[].{id: id, status: status}'.",
    ),
    Rule(
        "idempotency-missing",
        "warning",
        "A POST/PATCH that may create a duplicate has an idempotency key.",
        "Add a required argument such as request_id and set execution_config.idempotency "
        "= {argument: request_id, header: Idempotency-Key}.",
    ),
    Rule(
        "delete-confirmation",
        "error",
        "A DELETE keeps its two-step confirmation.",
        "Remove 'safety.confirmation: false' (or set it to auto); add 'approval: true' "
        "for a human check on top.",
    ),
    Rule(
        "static-credential",
        "error",
        "No credential in a static header, query value or the URL.",
        "Store the value as a workspace secret (crank secrets set NAME) and bind it with "
        "request.auth: type header, query or basic, naming the secret.",
    ),
    Rule(
        "agent-too-many-tools",
        "warning",
        f"An agent has at most {MAX_TOOLS_ADVISED} tools.",
        "Split the agent by task: one agent for each job the model has to do.",
    ),
    Rule(
        "agent-tool-limit",
        "error",
        f"An agent has at most {MAX_TOOLS_ACCEPTED} tools.",
        "Split the agent by task; with more tools some LLM APIs refuse every request.",
    ),
    Rule(
        "agent-similar-tools",
        "warning",
        "An agent's tools have distinct names and descriptions.",
        "Rename or reword so each tool says what sets it apart, merge the two, or bind "
        "them to different agents.",
    ),
    Rule(
        "spec-invalid",
        "error",
        "The spec passes write-time validation (crank lint and the lint API only).",
        "Fix the field; the same check refuses the spec on every write.",
    ),
)

RULES: Final[dict[str, Rule]] = {rule.id: rule for rule in _RULES}


def finding(
    rule_id: str, resource: str, field: str | None, message: str, hint: str | None = None
) -> Finding:
    """A finding of rule ``rule_id``, with the rule's severity and, unless given, its hint."""
    rule = RULES[rule_id]
    return Finding(
        rule=rule.id,
        severity=rule.severity,
        resource=resource,
        field=field,
        message=message,
        hint=hint or rule.hint,
    )


def has_errors(findings: list[Finding]) -> bool:
    """Whether any finding is an ``error``, which blocks the publish or apply."""
    return any(f.severity == "error" for f in findings)


def operation_resource(name: str) -> str:
    """The ``resource`` of an operation's findings: ``operation:<name>``."""
    return f"operation:{name}"


def agent_resource(slug: str) -> str:
    """The ``resource`` of an agent's findings: ``agent:<slug>``."""
    return f"agent:{slug}"


def to_field_errors(
    findings: list[Finding], paths: Mapping[str, str] | None = None
) -> list[FieldError]:
    """The error findings as field errors (the ``errors`` of an error body).

    Without ``paths`` a field is the finding's own (a path inside its
    resource); with them it is prefixed by the resource's path in a file.
    """
    errors = []
    for f in findings:
        if f.severity != "error":
            continue
        prefix = paths.get(f.resource, f.resource) if paths is not None else ""
        field = ".".join(part for part in (prefix, f.field) if part)
        errors.append(FieldError(field, f"{f.message} [{f.rule}]"))
    return errors
