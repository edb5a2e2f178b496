"""A check of a spec is answered from memory for a spec of the same content."""

from __future__ import annotations

import msgspec
import pytest

from shared.engine import spec_memo
from shared.engine.spec import OperationSpec, operation_from_builtins
from shared.engine.spec_validation import FieldError


def spec(name: str, title: str = "Rate") -> OperationSpec:
    return operation_from_builtins(
        {
            "name": name,
            "title": title,
            "description": "Gets a rate. Use when asked.",
            "input": {"type": "object"},
            "request": {"method": "GET", "url": "https://api.example.com/rate"},
        }
    )


def test_the_same_content_is_checked_once_and_a_change_is_checked_again() -> None:
    calls: list[str] = []

    @spec_memo.memoized_by_spec
    def check(value: OperationSpec) -> list[FieldError]:
        calls.append(value.name)
        return [FieldError("title", value.title or "")]

    first = check(spec("a"))
    again = check(msgspec.structs.replace(spec("a")))  # another object, the same content
    changed = check(spec("a", title="Other"))
    assert calls == ["a", "a"]
    assert first == again == [FieldError("title", "Rate")]
    assert changed == [FieldError("title", "Other")]


def test_an_answer_changed_by_one_caller_is_not_what_the_next_receives() -> None:
    @spec_memo.memoized_by_spec
    def check(value: OperationSpec) -> list[FieldError]:
        return [FieldError("", value.name)]

    check(spec("a")).append(FieldError("x", "added by a caller"))
    assert check(spec("a")) == [FieldError("", "a")]


def test_the_memory_keeps_the_most_recent_answers_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(spec_memo, "MAX_ENTRIES", 2)
    calls: list[str] = []

    @spec_memo.memoized_by_spec
    def check(value: OperationSpec) -> list[FieldError]:
        calls.append(value.name)
        return []

    for name in ("a", "b", "a", "c", "a", "b"):
        check(spec(name))
    assert calls == ["a", "b", "c", "b"]  # b was the least recent when c came
