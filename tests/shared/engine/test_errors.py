# ruff: noqa: RUF001 - the Russian messages are Cyrillic on purpose
from __future__ import annotations

import re

import pytest

from shared.engine.errors import (
    ERROR_CODES,
    ErrorCode,
    Language,
    ToolError,
    confirmation_required,
    invalid_arguments,
    is_recoverable,
    is_transient,
    secret_missing,
    suggested_action,
)

# The error code table of docs/mcp-interface.md: the code and whether calling again, as the
# suggested action says, can succeed (docs/architecture.md, "Error codes"). Changed on purpose
# from "the same call later may succeed" for the codes marked "again".
DOCUMENTED_RECOVERABLE: dict[str, bool] = {
    "invalid_arguments": True,  # again
    "confirmation_required": True,  # again
    "confirmation_invalid": True,  # again
    "confirmation_declined": False,
    "idempotency_conflict": True,  # again
    "idempotency_in_progress": True,
    "upstream_rate_limited": True,
    "upstream_timeout": True,
    "upstream_unavailable": True,
    "upstream_error": True,
    "upstream_bad_request": True,  # again
    "upstream_auth_failed": False,
    "upstream_not_found": True,  # again
    "upstream_conflict": True,  # again
    "upstream_response_invalid": False,
    "upstream_response_too_large": True,  # again
    "upstream_blocked": False,
    "secret_missing": False,
    "approval_denied": False,
    "approval_expired": True,  # again
    "internal_error": True,
}
# The same call, unchanged, may succeed later: what recoverable meant before; these alone
# carry retry_after_s and release an idempotency key.
DOCUMENTED_TRANSIENT = {
    "idempotency_in_progress",
    "upstream_rate_limited",
    "upstream_timeout",
    "upstream_unavailable",
    "upstream_error",
    "internal_error",
}
# What a suggested action says: call again (recoverable), or stop (not recoverable).
_CALLS_AGAIN = {
    "en": re.compile(r"call again|repeat the same call|retry|trying again", re.IGNORECASE),
    "ru": re.compile(r"повторите|повторяйте|пробовать снова", re.IGNORECASE),
}
_STOPS = {
    "en": re.compile(r"^(Do not repeat|Tell the user)"),
    "ru": re.compile(r"^(Не повторяйте|Сообщите пользователю)"),
}


def test_the_closed_list_is_exactly_the_design_list() -> None:
    assert set(ERROR_CODES) == set(DOCUMENTED_RECOVERABLE)


@pytest.mark.parametrize("code", ERROR_CODES)
def test_recoverable_is_what_design_states(code: ErrorCode) -> None:
    assert is_recoverable(code) is DOCUMENTED_RECOVERABLE[code]
    error = ToolError.of(code, status=500, token="ct_x", problems="$.a: bad")
    assert error.recoverable is DOCUMENTED_RECOVERABLE[code]
    assert is_transient(code) is error.transient is (code in DOCUMENTED_TRANSIENT)


@pytest.mark.parametrize("language", ["en", "ru"])
@pytest.mark.parametrize("code", ERROR_CODES)
def test_recoverable_agrees_with_the_suggested_action(code: ErrorCode, language: Language) -> None:
    """The issue's complaint: recoverable false while the action says to call again."""
    action = suggested_action(code, language)
    if is_recoverable(code):
        assert _CALLS_AGAIN[language].search(action), action
        assert not _STOPS[language].search(action), action
    else:
        assert _STOPS[language].search(action), action


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
        "recoverable": True,
        "suggested_action": "Check the identifiers in the arguments; call again only with corrected ones.",
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
    # Recoverable by a changed call, but the same call does not succeed later: no wait to tell.
    corrected = ToolError.of("upstream_bad_request", status=400, retry_after_s=30)
    assert corrected.recoverable is True
    assert "retry_after_s" not in corrected.to_structured()


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


def test_confirmation_required_carries_the_token_in_the_message_and_its_own_field() -> None:
    error = confirmation_required("ct_abc", language="ru")
    message = (
        'Операция требует подтверждения. Повторите вызов с _crank_confirmation_token="ct_abc".'
    )
    assert error.to_structured("req_1") == {
        "error_code": "confirmation_required",
        "message": message,
        "recoverable": True,
        "suggested_action": suggested_action("confirmation_required", "ru"),
        "request_id": "req_1",
        "confirmation_token": "ct_abc",
    }


def test_only_confirmation_required_has_a_confirmation_token() -> None:
    for code in ERROR_CODES:
        if code != "confirmation_required":
            error = ToolError.of(code, status=500, token="ct_x", problems="$.a: bad")
            assert "confirmation_token" not in error.to_structured()


def test_secret_missing_keeps_the_secret_name_out_of_the_message() -> None:
    error = secret_missing("STRIPE_KEY")
    assert "STRIPE_KEY" not in error.message
    assert error.details == {"secret": "STRIPE_KEY"}


def test_tool_error_is_an_exception_with_its_message() -> None:
    with pytest.raises(ToolError) as caught:
        raise ToolError.of("internal_error")
    assert str(caught.value) == caught.value.message
