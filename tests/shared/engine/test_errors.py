# ruff: noqa: RUF001 - the Russian messages are Cyrillic on purpose
from __future__ import annotations

import pytest

from shared.engine.errors import (
    ERROR_CODES,
    ErrorCode,
    ToolError,
    confirmation_required,
    invalid_arguments,
    is_recoverable,
    secret_missing,
    suggested_action,
)

# The error code table of docs/mcp-interface.md: the code and whether repeating may succeed.
DOCUMENTED_RECOVERABLE: dict[str, bool] = {
    "invalid_arguments": False,
    "confirmation_required": False,
    "confirmation_invalid": False,
    "confirmation_declined": False,
    "idempotency_conflict": False,
    "idempotency_in_progress": True,
    "upstream_rate_limited": True,
    "upstream_timeout": True,
    "upstream_unavailable": True,
    "upstream_error": True,
    "upstream_bad_request": False,
    "upstream_auth_failed": False,
    "upstream_not_found": False,
    "upstream_conflict": False,
    "upstream_response_invalid": False,
    "upstream_response_too_large": False,
    "upstream_blocked": False,
    "secret_missing": False,
    "approval_denied": False,
    "approval_expired": False,
    "internal_error": True,
}


def test_the_closed_list_is_exactly_the_design_list() -> None:
    assert set(ERROR_CODES) == set(DOCUMENTED_RECOVERABLE)


@pytest.mark.parametrize("code", ERROR_CODES)
def test_recoverable_is_what_design_states(code: ErrorCode) -> None:
    assert is_recoverable(code) is DOCUMENTED_RECOVERABLE[code]
    error = ToolError.of(code, status=500, token="ct_x", problems="$.a: bad")
    assert error.recoverable is DOCUMENTED_RECOVERABLE[code]


@pytest.mark.parametrize("code", ERROR_CODES)
def test_every_code_has_a_message_and_action_in_english_and_russian(code: ErrorCode) -> None:
    english = ToolError.of(code, status=500, token="ct_x", problems="$.a: bad")
    russian = ToolError.of(code, language="ru", status=500, token="ct_x", problems="$.a: bad")
    assert english.message
    assert russian.message
    assert english.message != russian.message
    assert suggested_action(code, "en") == english.suggested_action
    assert suggested_action(code, "ru") == russian.suggested_action
    assert "{" not in english.message.replace("{token", "")


def test_structured_error_has_exactly_the_design_fields() -> None:
    error = ToolError.of("upstream_not_found", status=404)
    assert error.to_structured("req_1") == {
        "error_code": "upstream_not_found",
        "message": "The external API found nothing (HTTP 404).",
        "recoverable": False,
        "suggested_action": "Check the identifiers in the arguments.",
        "request_id": "req_1",
    }


def test_russian_rate_limit_error_matches_the_seed_example() -> None:
    error = ToolError.of("upstream_rate_limited", language="ru", status=429)
    assert error.to_structured("req_123") == {
        "error_code": "upstream_rate_limited",
        "message": "Внешний API вернул HTTP 429.",
        "recoverable": True,
        "suggested_action": "Повторите запрос позже.",
        "request_id": "req_123",
    }


def test_retry_after_accompanies_recoverable_errors_only() -> None:
    recoverable = ToolError.of("upstream_rate_limited", status=429, retry_after_s=30)
    assert recoverable.to_structured()["retry_after_s"] == 30
    final = ToolError.of("upstream_not_found", status=404, retry_after_s=30)
    assert "retry_after_s" not in final.to_structured()


def test_unknown_error_code_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown error code"):
        ToolError("rate_limited", "x", suggested_action="y")  # type: ignore[arg-type]


def test_invalid_arguments_names_each_field_and_rule() -> None:
    error = invalid_arguments(
        [("$.base", "pattern", "'usd' does not match"), ("$.quote", "required", "is required")]
    )
    assert error.error_code == "invalid_arguments"
    assert "$.base" in error.message
    assert "$.quote" in error.message
    assert error.details["errors"] == [
        {"field": "$.base", "rule": "pattern"},
        {"field": "$.quote", "rule": "required"},
    ]


def test_confirmation_required_carries_the_token_in_message_and_details() -> None:
    error = confirmation_required("ct_abc", language="ru")
    assert error.message == (
        'Операция требует подтверждения. Повторите вызов с _crank_confirmation_token="ct_abc".'
    )
    assert error.details == {"confirmation_token": "ct_abc"}


def test_secret_missing_keeps_the_secret_name_out_of_the_message() -> None:
    error = secret_missing("STRIPE_KEY")
    assert "STRIPE_KEY" not in error.message
    assert error.details == {"secret": "STRIPE_KEY"}


def test_tool_error_is_an_exception_with_its_message() -> None:
    with pytest.raises(ToolError) as caught:
        raise ToolError.of("internal_error")
    assert str(caught.value) == caught.value.message
