"""The linter rule by rule, with tool-design.md's good and bad examples in English and Russian."""

# ruff: noqa: RUF001 - the Russian examples are Cyrillic on purpose

from __future__ import annotations

import re
from typing import Any

import msgspec
import pytest

from control_plane.demo import load_demo_file
from control_plane.lint import (
    RULES,
    Finding,
    check_and_lint_file,
    file_paths,
    lint_agent,
    lint_file,
    lint_operation,
    to_field_errors,
)
from control_plane.lint.findings import MAX_TOOLS_ACCEPTED, MAX_TOOLS_ADVISED
from control_plane.services.apply import check_file
from shared.engine.spec import CrankFile, FileAgentSpec, OperationSpec
from tests.support.paths import DOCS_DIR

DOCS = DOCS_DIR

GOOD_EN = (
    "Gets a customer's card by email. Use when you need to find the customer before opening "
    "a support ticket or checking an order's status. Returns the customer id, name, email "
    "and current status."
)
GOOD_RU = (
    "Получает карточку клиента по email. Используйте, когда нужно найти клиента перед "
    "созданием обращения или проверкой статуса заказа. Возвращает идентификатор клиента, "
    "имя, email и текущий статус."
)


def spec(**changes: Any) -> OperationSpec:
    """The seed's good example: get_customer_by_email, every check satisfied."""
    value: dict[str, Any] = {
        "name": "get_customer_by_email",
        "description": GOOD_EN,
        "input": {
            "type": "object",
            "properties": {
                "email": {"type": "string", "description": "Customer email, e.g. a@b.example"},
                "include_orders": {"type": "boolean", "description": "Also count open orders"},
            },
            "required": ["email"],
            "additionalProperties": False,
        },
        "request": {"method": "GET", "url": "https://crm.example/customers"},
        "response": {"select": "{customer_id: id, status: status, open_orders_count: open}"},
    }
    value.update(changes)
    return msgspec.convert(value, OperationSpec)


def with_params(**properties: Any) -> OperationSpec:
    return spec(input={"type": "object", "properties": properties})


def rules(findings: list[Finding]) -> list[tuple[str, str | None]]:
    return [(f.rule, f.field) for f in findings]


def rule_ids(findings: list[Finding]) -> set[str]:
    return {f.rule for f in findings}


# --- the good examples pass ------------------------------------------------------------


@pytest.mark.parametrize("description", [GOOD_EN, GOOD_RU])
def test_good_example_of_the_seed_has_no_findings(description: str) -> None:
    assert lint_operation(spec(description=description)) == []


def test_demo_file_lints_without_any_finding() -> None:
    assert lint_file(load_demo_file(8090)) == []


# --- names -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "call_api",
        "manage_user",
        "execute_request",
        "do_request",
        "handle_orders",
        "run",
        "api_call_v2",
        "ProcessData",
        "x",
    ],
)
def test_generic_name_is_an_error(name: str) -> None:
    findings = lint_operation(spec(name=name))
    assert ("name-generic", "name") in rules(findings)
    assert next(f for f in findings if f.rule == "name-generic").severity == "error"


@pytest.mark.parametrize(
    "name", ["get_customer_by_email", "create_support_ticket", "delete_draft_invoice"]
)
def test_specific_names_of_the_seed_pass(name: str) -> None:
    assert not {"name-generic", "name-style"} & rule_ids(lint_operation(spec(name=name)))


@pytest.mark.parametrize(
    ("name", "suggestion"),
    [("getCustomerByEmail", "get_customer_by_email"), ("Get-Order", "get_order")],
)
def test_name_not_in_snake_case_is_a_warning_with_the_snake_case_form(
    name: str, suggestion: str
) -> None:
    [found] = [f for f in lint_operation(spec(name=name)) if f.rule == "name-style"]
    assert found.severity == "warning"
    assert suggestion in found.hint


# --- descriptions ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "description",
    [
        # The seed's bad examples, word for word, and their English equivalents.
        "Работает с клиентами.",
        "Обрабатывает данные.",
        "Выполняет запрос к API.",
        "Works with customers.",
        "Processes data.",
        "Executes a request to the API.",
        # Kin of them.
        "Управляет пользователями.",
        "Вызывает внешний API и возвращает ответ.",
        "Manages users.",
        "Handles orders. Use when the user asks about orders.",
        "Calls the external API and returns the response.",
        "Gets data.",
    ],
)
def test_vague_description_is_an_error(description: str) -> None:
    findings = lint_operation(spec(description=description))
    assert rules(findings) == [("description-vague", "description")]
    assert findings[0].severity == "error"


def test_description_not_starting_with_an_action_is_a_warning() -> None:
    for description in (
        "This endpoint returns a customer's card by email. Use when a ticket needs one.",
        "Карточка клиента по email. Используйте, когда нужно найти клиента.",
    ):
        findings = lint_operation(spec(description=description))
        assert rules(findings) == [("description-action", "description")], description
        assert findings[0].severity == "warning"


def test_description_that_does_not_say_when_to_use_the_tool_is_a_warning() -> None:
    for description in (
        "Gets a customer's card by email. Returns the id, name and status.",
        "Получает карточку клиента по email. Возвращает идентификатор и статус.",
    ):
        findings = lint_operation(spec(description=description))
        assert rules(findings) == [("description-when", "description")], description
    russian = lint_operation(spec(description="Получает карточку клиента по email."))
    assert "Russian for 'Use when ...'" in russian[0].hint


CYRILLIC = re.compile("[\u0400-\u04ff]")


def test_english_hints_hold_no_russian_text() -> None:
    """The linter speaks English: a Russian description gets its hints in English too."""
    for rule in RULES.values():
        assert not CYRILLIC.search(rule.summary + rule.hint), rule.id
    for description in ("Карточка клиента по email.", "Получает карточку клиента по email."):
        for found in lint_operation(spec(description=description)):
            assert not CYRILLIC.search(found.hint), (found.rule, found.hint)


# --- parameters ------------------------------------------------------------------------


def test_bad_parameters_of_the_seed_are_flagged() -> None:
    """The seed's bad input: {"action": "string", "data": "object"}."""
    findings = lint_operation(with_params(action={"type": "string"}, data={"type": "object"}))
    assert rules(findings) == [
        ("param-description", "input.properties.action"),
        ("param-multi-action", "input.properties.action"),
        ("param-description", "input.properties.data"),
        ("param-untyped-object", "input.properties.data"),
    ]
    assert {f.severity for f in findings} == {"warning"}


@pytest.mark.parametrize("name", ["action", "operation", "mode", "Command"])
def test_action_like_parameter_flags_a_multi_action_endpoint(name: str) -> None:
    findings = lint_operation(
        with_params(**{name: {"type": "string", "enum": ["a", "b"], "description": "What"}})
    )
    assert rules(findings) == [("param-multi-action", f"input.properties.{name}")]


def test_nested_parameters_are_checked_and_named_by_path() -> None:
    address = {
        "type": "object",
        "description": "Postal address",
        "properties": {"city": {"type": "string"}},
    }
    lines = {"type": "array", "description": "Lines", "items": {"$ref": "#/$defs/line"}}
    schema = {
        "type": "object",
        "properties": {"address": address, "lines": lines},
        "$defs": {"line": {"type": "object", "properties": {"sku": {"type": "string"}}}},
    }
    assert rules(lint_operation(spec(input=schema))) == [
        ("param-description", "input.properties.address.properties.city"),
        ("param-description", "input.properties.lines.items.properties.sku"),
    ]


def test_described_typed_and_structured_parameters_pass() -> None:
    schema = {
        "type": "object",
        "properties": {
            "address": {
                "type": "object",
                "description": "Postal address",
                "properties": {"city": {"type": "string", "description": "City"}},
            },
            "labels": {
                "type": "object",
                "description": "Labels",
                "additionalProperties": {"type": "string"},
            },
            "kind": {"$ref": "#/$defs/kind"},
        },
        "$defs": {"kind": {"type": "string", "enum": ["a", "b"], "description": "Kind"}},
    }
    assert lint_operation(spec(input=schema)) == []


def test_parameter_without_a_type_is_a_warning() -> None:
    findings = lint_operation(with_params(anything={"description": "Whatever you like"}))
    assert rules(findings) == [("param-type-missing", "input.properties.anything")]


@pytest.mark.parametrize(
    "declaration",
    [
        {"type": "string", "pattern": "^(asc|desc)$", "description": "Sort order"},
        {"type": "string", "pattern": "^active|blocked$", "description": "Status"},
        {"type": "string", "description": "Sort order, one of asc, desc"},
        {"type": "string", "description": "Either 'asc' or 'desc'"},
        {"type": "string", "description": "`asc`, `desc`"},
        {"type": "string", "description": "Статус: одно из active, blocked"},
        {"type": "string", "description": "Порядок: 'asc' или 'desc'"},
    ],
)
def test_small_value_set_without_an_enum_is_a_warning(declaration: dict[str, Any]) -> None:
    findings = lint_operation(with_params(order=declaration))
    assert rules(findings) == [("param-enum", "input.properties.order")]


def test_enum_and_free_text_patterns_are_not_flagged() -> None:
    findings = lint_operation(
        with_params(
            order={"type": "string", "enum": ["asc", "desc"], "description": "one of asc, desc"},
            code={"type": "string", "pattern": "^[A-Z]{3}$", "description": "ISO 4217 code"},
        )
    )
    assert findings == []


@pytest.mark.parametrize("keyword", ["oneOf", "anyOf", "allOf"])
def test_top_level_combinator_in_the_input_schema_is_an_error(keyword: str) -> None:
    variants = [
        {"properties": {"email": {"type": "string", "description": "Email"}}},
        {"properties": {"phone": {"type": "string", "description": "Phone"}}},
    ]
    findings = lint_operation(spec(input={"type": "object", keyword: variants}))
    assert rules(findings) == [("input-top-level-combinator", f"input.{keyword}")]
    assert findings[0].severity == "error"


# --- responses -------------------------------------------------------------------------


def test_missing_response_select_is_a_warning() -> None:
    findings = lint_operation(spec(response={"select": None}))
    assert rules(findings) == [("response-select", "response.select")]
    assert findings[0].severity == "warning"


def list_spec(**response: Any) -> OperationSpec:
    return spec(
        name="list_orders",
        description="Lists a customer's orders, newest first. Use when the user asks which "
        "orders they have.",
        response=response,
    )


def test_list_endpoint_with_a_large_array_cap_is_a_warning() -> None:
    findings = lint_operation(list_spec(select="orders[].{id: id}", max_items=500))
    assert rules(findings) == [("response-array-cap", "response.max_items")]


def test_list_endpoint_returning_whole_items_is_a_warning() -> None:
    assert rules(lint_operation(list_spec(select="orders"))) == [
        ("response-array-fields", "response.select")
    ]
    assert rules(lint_operation(list_spec(select="orders[*]"))) == [
        ("response-array-fields", "response.select")
    ]


@pytest.mark.parametrize(
    "select",
    [
        "orders[].{id: id, status: status}",
        "orders[?status=='paid'].{id: id}",
        "orders[*].id",
        "map(&{id: id}, orders)",
    ],
)
def test_list_endpoint_projecting_item_fields_within_the_cap_passes(select: str) -> None:
    assert lint_operation(list_spec(select=select, max_items=20)) == []


def test_endpoint_is_a_list_by_name_description_or_select() -> None:
    by_select = spec(response={"select": "items[].{id: id}", "max_items": 1000})
    assert rule_ids(lint_operation(by_select)) == {"response-array-cap"}
    single = spec(response={"select": "{id: id}", "max_items": 1000})
    assert lint_operation(single) == []  # one object: max_items caps nothing that matters


# --- safety ----------------------------------------------------------------------------


def refund(method: str = "POST", **changes: Any) -> OperationSpec:
    return spec(
        name="create_refund",
        description="Refunds a paid order. Use when the customer asks for their money back.",
        input={
            "type": "object",
            "properties": {
                "request_id": {"type": "string", "description": "Unique id of this refund"},
                "order_id": {"type": "string", "description": "Order id, e.g. ord_123"},
            },
            "required": ["request_id", "order_id"],
        },
        request={"method": method, "url": "https://sales.example/refunds"},
        response={"select": "{refund_id: id}"},
        **changes,
    )


@pytest.mark.parametrize("method", ["POST", "PATCH"])
def test_post_or_patch_without_idempotency_is_a_warning(method: str) -> None:
    findings = lint_operation(refund(method))
    assert rules(findings) == [("idempotency-missing", "execution_config.idempotency")]
    assert findings[0].severity == "warning"


def test_post_with_idempotency_and_put_pass() -> None:
    idempotent = {"idempotency": {"argument": "request_id", "header": "Idempotency-Key"}}
    assert lint_operation(refund(execution_config=idempotent)) == []
    assert lint_operation(refund("PUT")) == []


def delete_invoice(**safety: Any) -> OperationSpec:
    return spec(
        name="delete_draft_invoice",
        description="Deletes a draft invoice. Use when the user asks to discard a draft.",
        input={
            "type": "object",
            "properties": {"invoice_id": {"type": "string", "description": "Invoice id"}},
            "required": ["invoice_id"],
        },
        request={"method": "DELETE", "url": "https://billing.example/invoices/{invoice_id}"},
        response={"select": "{deleted: deleted}"},
        safety=safety,
    )


def test_delete_with_confirmation_switched_off_is_an_error() -> None:
    findings = lint_operation(delete_invoice(confirmation=False))
    assert rules(findings) == [("delete-confirmation", "safety.confirmation")]
    assert findings[0].severity == "error"


def test_delete_keeps_confirmation_and_may_add_approval() -> None:
    assert lint_operation(delete_invoice()) == []
    assert lint_operation(delete_invoice(confirmation=True, approval=True)) == []


# --- credentials in clear ---------------------------------------------------------------


def test_a_static_credential_is_an_error_pointing_to_secrets() -> None:
    request = {
        "method": "GET",
        "url": "https://crm.example/customers?key=AIzaSyA-1234567890abcdefghijklmnopqrstu",
        "headers": {"Accept": "application/json", "X-Api-Key": "public"},
        "query": {"email": "email", "access_token": "'abc'"},
    }
    findings = lint_operation(spec(request=request))
    assert rules(findings) == [
        ("static-credential", "request.headers.X-Api-Key"),
        ("static-credential", "request.url"),
        ("static-credential", "request.query.access_token"),
    ]
    for found in findings:
        assert found.severity == "error"
        assert "workspace secret" in found.message
        assert "crank secrets set" in found.hint


def test_a_static_credential_is_said_once_in_crank_lint() -> None:
    """Validation refuses the same field with the same detector; lint reports it once."""
    request = {"method": "GET", "url": "https://crm.example/customers"}
    file = CrankFile(
        operations=[spec(request={**request, "headers": {"Authorization": "Bearer abc"}})]
    )
    findings = check_and_lint_file(file, check_file(file))
    assert [(f.rule, f.field) for f in findings if f.severity == "error"] == [
        ("static-credential", "request.headers.Authorization")
    ]


def test_secrets_bound_by_auth_and_argument_query_values_pass() -> None:
    request = {
        "method": "GET",
        "url": "https://crm.example/customers",
        "query": {"email": "email"},
        "auth": {"type": "query", "name": "api_key", "secret": "CRM_KEY"},
    }
    assert lint_operation(spec(request=request)) == []


# --- agents ----------------------------------------------------------------------------


NOUNS = [
    "account",
    "address",
    "invoice",
    "order",
    "refund",
    "ticket",
    "customer",
    "product",
    "warehouse",
    "shipment",
    "coupon",
    "payment",
    "subscription",
    "contract",
    "supplier",
    "employee",
    "vehicle",
    "booking",
    "report",
    "campaign",
    "device",
]


def tools(count: int) -> dict[str, OperationSpec]:
    """``count`` distinct tools: get_account, get_address, ..."""
    assert count <= len(NOUNS)
    return {
        f"get_{noun}": spec(name=f"get_{noun}", description=f"Gets one {noun} by its id.")
        for noun in NOUNS[:count]
    }


def agent(names: list[str]) -> FileAgentSpec:
    return FileAgentSpec(slug="support", operations=names)


def test_agent_with_a_few_distinct_tools_has_no_findings() -> None:
    demo = load_demo_file(8090)
    operations = {op.name: op for op in demo.operations}
    for demo_agent in demo.agents:
        assert lint_agent(demo_agent, operations) == []


def test_agent_with_more_than_twenty_tools_is_a_warning() -> None:
    catalog = tools(MAX_TOOLS_ADVISED + 1)
    findings = lint_agent(agent(list(catalog)), catalog)
    assert rules(findings) == [("agent-too-many-tools", "operations")]
    assert findings[0].resource == "agent:support"
    assert lint_agent(agent(list(catalog)[:MAX_TOOLS_ADVISED]), catalog) == []


def test_agent_with_more_tools_than_clients_accept_is_an_error() -> None:
    names = [f"tool_{index}" for index in range(MAX_TOOLS_ACCEPTED + 1)]
    findings = lint_agent(agent(names), {})
    assert rules(findings) == [("agent-tool-limit", "operations")]
    assert findings[0].severity == "error"


def test_near_identical_tool_names_are_a_warning() -> None:
    catalog = {
        "get_order": spec(name="get_order", description="Gets one order by id."),
        "get_orders": spec(name="get_orders", description="Lists the orders of a customer."),
        "get_order_v2": spec(name="get_order_v2", description="Refunds a paid order by id."),
    }
    findings = lint_agent(agent(list(catalog)), catalog)
    assert rules(findings) == [
        ("agent-similar-tools", "operations[1]"),
        ("agent-similar-tools", "operations[2]"),
    ]
    assert "'get_order' and 'get_orders'" in findings[0].message


def test_near_identical_tool_descriptions_are_a_warning() -> None:
    catalog = {
        "get_rate": spec(name="get_rate", description=GOOD_EN),
        "convert_amount": spec(name="convert_amount", description=GOOD_EN + " Cached."),
    }
    findings = lint_agent(agent(list(catalog)), catalog)
    assert rules(findings) == [("agent-similar-tools", "operations[1]")]
    assert "descriptions" in findings[0].message


# --- files, the rule table, the docs ---------------------------------------------------


def test_lint_file_lints_agents_against_the_file_and_the_workspace() -> None:
    file = CrankFile(operations=[spec(name="call_api")], agents=[agent(["call_api", "stored"])])
    stored = {"stored": spec(name="stored", description="Works with customers.")}
    findings = lint_file(file, stored)
    assert rules(findings) == [("name-generic", "name")]  # the stored one is the workspace's
    near = {"call_apis": spec(name="call_apis")}
    file = CrankFile(operations=[spec(name="call_api")], agents=[agent(["call_api", "call_apis"])])
    assert ("agent-similar-tools", "operations[1]") in rules(lint_file(file, near))


def test_validation_errors_become_spec_invalid_without_repeating_a_lint_finding() -> None:
    file = CrankFile(
        operations=[
            spec(name="bad name"),
            spec(
                name="remove_invoice",
                description="Deletes an invoice. Use when asked to.",
                request={"method": "DELETE", "url": "https://billing.example/invoices"},
                safety={"confirmation": False},
            ),
        ]
    )
    findings = check_and_lint_file(file, check_file(file))
    assert [(f.rule, f.resource, f.field) for f in findings if f.severity == "error"] == [
        ("spec-invalid", "operation:bad name", "name"),
        ("delete-confirmation", "operation:remove_invoice", "safety.confirmation"),
    ]


def test_a_pattern_re2_cannot_compile_is_a_pattern_unsupported_error_with_the_reason() -> None:
    bad = with_params(
        code={"type": "string", "description": "Code, e.g. AA", "pattern": "^(a)\\1$"},
        name={"type": "string", "description": "Name, e.g. Иван", "pattern": "^\\p{L}+$"},
        tag={"type": "string", "description": "Tag, e.g. x1", "pattern": "^(?=x)\\w+$"},
    )
    found = [f for f in lint_operation(bad) if f.rule == "pattern-unsupported"]
    assert [(f.severity, f.field) for f in found] == [
        ("error", "input.properties.code.pattern"),
        ("error", "input.properties.tag.pattern"),
    ]
    assert "invalid escape sequence: \\1" in found[0].message
    assert "(?=" in found[1].message
    assert "RE2" in found[0].hint


def test_a_refused_pattern_is_reported_once_by_crank_lint() -> None:
    file = CrankFile(
        operations=[
            spec(
                input={
                    "type": "object",
                    "properties": {
                        "email": {"type": "string", "description": "e.g. a@b", "pattern": "(?<=@)x"}
                    },
                }
            )
        ]
    )
    findings = check_and_lint_file(file, check_file(file))
    assert [(f.rule, f.field) for f in findings if f.severity == "error"] == [
        ("pattern-unsupported", "input.properties.email.pattern")
    ]


def test_error_findings_become_field_errors_with_paths_into_the_file() -> None:
    file = CrankFile(operations=[spec(), spec(name="call_api")])
    errors = to_field_errors(lint_file(file), file_paths(file))
    assert [(e.field, e.message.endswith("[name-generic]")) for e in errors] == [
        ("operations[1].name", True)
    ]


def test_every_finding_carries_its_rule_severity_and_a_hint() -> None:
    bad = spec(
        name="manage_user",
        description="Работает с клиентами.",
        input={"type": "object", "oneOf": [{}], "properties": {"mode": {}}},
        request={"method": "PATCH", "url": "https://crm.example/users"},
        response={"select": None},
    )
    findings = lint_operation(bad)
    assert len(findings) >= 6
    for found in findings:
        assert found.severity == RULES[found.rule].severity
        assert found.hint
        assert found.resource == "operation:manage_user"


def test_every_rule_is_documented_in_both_languages() -> None:
    english = (DOCS / "lint.md").read_text(encoding="utf-8")
    russian = (DOCS / "ru" / "lint.md").read_text(encoding="utf-8")
    for rule in RULES.values():
        row = re.search(rf"^\| `{re.escape(rule.id)}` \| (\w+) \|", english, re.MULTILINE)
        assert row is not None, f"{rule.id} is not in the rule table of docs/lint.md"
        assert row.group(1) == rule.severity, rule.id
        assert f"`{rule.id}`" in russian, f"{rule.id} is not in docs/ru/lint.md"


# --- request mappings read declared arguments -------------------------------------------


def test_a_query_mapping_naming_a_missing_argument_is_an_error_with_a_did_you_mean() -> None:
    typo = spec(
        request={
            "method": "GET",
            "url": "https://crm.example/customers",
            "query": {"email": "emial", "orders": "include_orders"},
        }
    )
    [found] = [f for f in lint_operation(typo) if f.rule.startswith("request-argument")]
    assert (found.rule, found.severity, found.field) == (
        "request-argument-unknown",
        "error",
        "request.query.email",
    )
    assert found.message == "'emial' reads argument 'emial', which the input schema does not allow"
    assert found.hint == "Did you mean 'email'?"
    assert check_file(CrankFile(operations=[typo])) == []  # valid: only the linter sees it


def test_a_body_reading_an_undeclared_argument_is_a_warning_when_others_are_allowed() -> None:
    schema = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "Words to look for"}},
    }
    body = spec(
        input=schema,
        request={"method": "POST", "url": "https://crm.example/search", "body": "{q: qeury}"},
    )
    found = [f for f in lint_operation(body) if f.rule.startswith("request-argument")]
    assert [(f.rule, f.severity, f.field, f.hint) for f in found] == [
        ("request-argument-undeclared", "warning", "request.body", "Did you mean 'query'?")
    ]


@pytest.mark.parametrize(
    "expression", ["email", "{e: email, o: include_orders}", "email || 'x'", "@", "length(email)"]
)
def test_mappings_of_declared_arguments_have_no_finding(expression: str) -> None:
    mapped = spec(
        request={"method": "GET", "url": "https://crm.example/c", "query": {"q": expression}}
    )
    assert not {f.rule for f in lint_operation(mapped)} & {
        "request-argument-unknown",
        "request-argument-undeclared",
    }
