from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from shared.engine.errors import ToolError
from shared.engine.masking import Masker
from shared.engine.response_selector import (
    MAX_RETRY_AFTER_S,
    ResponseSelector,
    Selected,
    code_for_status,
    error_for_status,
    parse_retry_after,
    structured_content,
)


def selector(
    select: str | None = None, max_items: int = 50, max_bytes: int = 65536
) -> ResponseSelector:
    return ResponseSelector(select=select, max_items=max_items, max_bytes=max_bytes)


def body(value: Any) -> bytes:
    return json.dumps(value).encode()


def failure(status: int, headers: dict[str, str] | None = None, raw: bytes = b"") -> ToolError:
    with pytest.raises(ToolError) as caught:
        selector().select(status, headers or {}, raw)
    return caught.value


def test_select_applies_the_jmespath_to_the_upstream_json() -> None:
    upstream = {"amount": 1.0, "base": "USD", "date": "2026-11-30", "rates": {"EUR": 0.9}}
    result = selector("{base: base, date: date, rates: rates}").select(200, {}, body(upstream))
    assert result == Selected({"base": "USD", "date": "2026-11-30", "rates": {"EUR": 0.9}}, False)


def test_without_select_the_whole_json_is_returned() -> None:
    assert selector().select(200, {}, body({"a": [1, 2]})) == Selected({"a": [1, 2]}, False)


def test_every_array_anywhere_is_capped_to_max_items_and_marked_truncated() -> None:
    upstream = {"items": list(range(10)), "nested": [{"tags": list(range(5))}]}
    result = selector(max_items=3).select(200, {}, body(upstream))
    assert result.value == {"items": [0, 1, 2], "nested": [{"tags": [0, 1, 2]}]}
    assert result.truncated


def test_top_level_array_is_capped() -> None:
    result = selector("data", max_items=2).select(200, {}, body({"data": [1, 2, 3]}))
    assert result == Selected([1, 2], True)


def test_arrays_within_the_cap_are_not_marked_truncated() -> None:
    assert not selector(max_items=3).select(200, {}, body([1, 2, 3])).truncated


def test_max_bytes_halves_the_longest_array_until_the_output_fits() -> None:
    upstream = {"long": ["x" * 10] * 40, "short": ["y" * 10] * 4}
    result = selector(max_items=100, max_bytes=300).select(200, {}, body(upstream))
    assert result.truncated
    assert len(json.dumps(result.value, separators=(",", ":"))) <= 300
    assert result.value["short"] == ["y" * 10] * 4
    assert 0 < len(result.value["long"]) < 40


def test_output_that_cannot_fit_even_without_arrays_is_too_large() -> None:
    with pytest.raises(ToolError) as caught:
        selector(max_bytes=256).select(200, {}, body({"blob": "x" * 1000, "list": [1, 2]}))
    assert caught.value.error_code == "upstream_response_too_large"


def test_selection_does_not_alter_repeated_calls() -> None:
    compiled = selector(max_items=2, max_bytes=256)
    raw = body({"a": list(range(100))})
    assert compiled.select(200, {}, raw) == compiled.select(200, {}, raw)


def test_non_json_success_without_select_becomes_text() -> None:
    assert selector().select(200, {}, b"plain ok") == Selected({"text": "plain ok"}, False)


def test_non_json_success_text_is_cut_to_max_bytes() -> None:
    result = selector(max_bytes=256).select(200, {}, "й".encode() * 1000)
    assert result.truncated
    assert len(json.dumps(result.value, ensure_ascii=False, separators=(",", ":")).encode()) <= 256


def test_non_json_success_with_select_is_upstream_response_invalid() -> None:
    with pytest.raises(ToolError) as caught:
        selector("a").select(200, {}, b"<html>oops</html>")
    assert caught.value.error_code == "upstream_response_invalid"
    assert caught.value.details["upstream_text"] == "<html>oops</html>"


def test_empty_success_body_selects_to_none() -> None:
    assert selector("a").select(204, {}, b"") == Selected(None, False)


@pytest.mark.parametrize(
    ("status", "code"),
    [
        (429, "upstream_rate_limited"),
        (502, "upstream_unavailable"),
        (503, "upstream_unavailable"),
        (504, "upstream_unavailable"),
        (500, "upstream_error"),
        (501, "upstream_error"),
        (599, "upstream_error"),
        (400, "upstream_bad_request"),
        (422, "upstream_bad_request"),
        (405, "upstream_bad_request"),
        (418, "upstream_bad_request"),
        (401, "upstream_auth_failed"),
        (403, "upstream_auth_failed"),
        (404, "upstream_not_found"),
        (410, "upstream_not_found"),
        (409, "upstream_conflict"),
        (408, "upstream_timeout"),
        (302, "upstream_response_invalid"),
    ],
)
def test_upstream_status_maps_to_its_error_code(status: int, code: str) -> None:
    assert code_for_status(status) == code
    error = failure(status, raw=b'{"error": "details"}')
    assert error.error_code == code
    assert error.details["upstream_status"] == status


def test_upstream_body_never_appears_in_the_message() -> None:
    error = failure(400, raw=b'{"error": "customer cus_123 has no card"}')
    assert "cus_123" not in error.message
    assert "cus_123" not in json.dumps(error.to_structured())
    assert "cus_123" in error.details["upstream_text"]


def test_upstream_excerpt_is_short_single_line_and_masks_secrets() -> None:
    raw = b"token=sk_live_1\n\x00" + b"A" * 5000
    with pytest.raises(ToolError) as caught:
        selector().select(500, {}, raw, masker=Masker(["sk_live_1"]))
    text = caught.value.details["upstream_text"]
    assert "sk_live_1" not in text
    assert text.startswith("token=****")
    assert "\n" not in text
    assert len(text) <= 201


def test_rate_limit_takes_retry_after_seconds() -> None:
    error = failure(429, {"Retry-After": "12"})
    assert error.retry_after_s == 12
    assert error.to_structured()["retry_after_s"] == 12


def test_retry_after_header_name_is_case_insensitive_and_pairs_work() -> None:
    with pytest.raises(ToolError) as caught:
        selector().select(503, [("retry-after", "5")], b"")
    assert caught.value.retry_after_s == 5


def test_retry_after_http_date_is_converted_to_seconds() -> None:
    now = datetime(2026, 11, 30, 6, 0, 0, tzinfo=UTC)
    assert parse_retry_after("Mon, 30 Nov 2026 06:01:30 GMT", now=now) == 90


def test_retry_after_is_bounded() -> None:
    assert parse_retry_after("999999") == MAX_RETRY_AFTER_S
    now = datetime(2026, 11, 30, 6, 0, 0, tzinfo=UTC)
    assert parse_retry_after("Mon, 30 Nov 2026 05:00:00 GMT", now=now) == 0


@pytest.mark.parametrize("value", [None, "", "soon", "-5", "1.5"])
def test_unreadable_retry_after_is_ignored(value: str | None) -> None:
    assert parse_retry_after(value) is None


def test_rate_limit_without_retry_after_has_no_retry_field() -> None:
    assert "retry_after_s" not in failure(429).to_structured()


def test_non_recoverable_status_errors_carry_no_retry_after() -> None:
    error = error_for_status(400, {"Retry-After": "5"}, b"")
    assert error.retry_after_s is None


def test_status_errors_speak_russian_when_asked() -> None:
    error = error_for_status(429, {}, b"", language="ru")
    assert error.message == "Внешний API вернул HTTP 429."


def test_arrays_are_wrapped_as_items_for_2025_protocol_versions_only() -> None:
    assert structured_content([1], wrap_arrays=True) == {"items": [1]}
    assert structured_content([1], wrap_arrays=False) == [1]
    assert structured_content({"a": 1}, wrap_arrays=True) == {"a": 1}


@pytest.mark.parametrize("select", ["length(ok)", "sort(ok)", "abs(ok)"])
def test_a_selection_that_fails_on_the_answer_is_upstream_response_invalid(select: str) -> None:
    # A JMESPath type error at run time used to escape the selector (internal_error).
    with pytest.raises(ToolError) as caught:
        selector(select).select(200, {}, body({"ok": True}))
    assert caught.value.error_code == "upstream_response_invalid"


def test_a_secret_the_upstream_echoes_never_reaches_the_model() -> None:
    secret = "sk_live_0123456789abcdef"
    upstream = {
        "headers": {"Authorization": f"Bearer {secret}", secret: "as a key"},
        "list": [f"x{secret}y", 1, None],
        "ok": True,
    }
    result = selector().select(200, {}, body(upstream), masker=Masker([secret]))
    assert secret not in json.dumps(result.value)
    assert result.value["headers"]["Authorization"] == "Bearer ****"
    assert result.value["list"] == ["x****y", 1, None]
    text = selector().select(200, {}, f"token={secret}".encode(), masker=Masker([secret]))
    assert text.value == {"text": "token=****"}


def test_an_upstream_error_excerpt_masks_a_json_escaped_secret() -> None:
    secret = 'ab/cd"ef'
    echoed = json.dumps({"auth": secret}).replace("/", "\\/").encode()
    with pytest.raises(ToolError) as raised:
        selector().select(401, {}, echoed, masker=Masker([secret]))
    text = raised.value.details["upstream_text"]
    assert "ab" not in text
    assert "****" in text
