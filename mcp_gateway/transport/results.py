# ruff: noqa: RUF001 - the Russian text is Cyrillic on purpose
"""A call outcome as the tools/call result of one protocol era, rendered once here
(docs/architecture.md, "The call outcome").

Every result is ``structuredContent`` plus its text copy; markers go in
``_meta`` so that a success always matches the tool's ``outputSchema``. The
2025 revisions need an object at the root: an array result travels there as
``{"items": [...]}``. A 2026-07-28 result carries ``resultType``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from mcp_gateway.approvals.tasks import POLL_INTERVAL_MS, TaskView
from mcp_gateway.pipeline.outcomes import (
    AskHuman,
    CallOutcome,
    Completed,
    Delivered,
    Failed,
    PendingApproval,
    TaskCreated,
    delivered,
)
from mcp_gateway.vocabulary.results import (
    APPROVAL_ID_META,
    APPROVAL_STATUS_META,
    REPLAYED_META,
    TRUNCATED_META,
    tool_result,
)
from shared.engine.errors import Language
from shared.engine.response_selector import structured_content
from shared.public_urls import approvals_path

REQUEST_KEY = "confirm"  # the one key of inputRequests / inputResponses (elicitation)

# What the model reads beside the approval structure, which is the seed's to the letter:
# the seed's URLs stay, and the words say they are not the model's to use.
_CALL_AGAIN: dict[Language, str] = {
    "en": (
        "A human must approve this call before it runs; nothing has been done yet. "
        "Call this tool again with the same arguments to get the outcome: "
        "until someone decides, the same approval comes back. "
        "The approval_url, approve and deny URLs are for the approver's front end, "
        "which holds an approval key; this agent's key cannot use them."
    ),
    "ru": (
        "Этот вызов должен подтвердить человек; пока ничего не выполнено. "
        "Повторите вызов этого инструмента с теми же аргументами, чтобы получить результат: "
        "пока решения нет, вернётся эта же заявка. "
        "approval_url и URL approve и deny — для интерфейса подтверждения, у которого есть "
        "ключ подтверждения; ключ этого агента с ними не работает."
    ),
}


class Rendering(msgspec.Struct, frozen=True):
    """What a rendering needs besides the outcome: the era and the call's context
    (a Struct: built per call, and cheaper to build than a NamedTuple)."""

    legacy: bool  # a 2025 revision: array results wrapped, no resultType
    language: Language
    request_id: str  # the call's, in every tool error
    path_prefix: str  # CRANK_PUBLIC_PATH_PREFIX, for the approval URLs
    workspace: str
    agent: str


def approval_required(prefix: str, workspace: str, agent: str, approval_id: str) -> dict[str, Any]:
    """The seed's structure, URLs as server paths (``/v1/...``) behind ``prefix``."""
    url = f"{approvals_path(prefix, workspace, agent)}/{approval_id}"
    return {
        "status": "approval_required",
        "approval_id": approval_id,
        "approval_url": url,
        "approve": {"method": "POST", "url": f"{url}/approve", "body": {"approve": "yes"}},
        "deny": {"method": "POST", "url": f"{url}/deny", "body": {"approve": "no"}},
    }


def _answer(outcome: Completed | Failed, how: Rendering, meta: dict[str, Any]) -> dict[str, Any]:
    if isinstance(outcome, Failed):
        structured, is_error = outcome.error.to_structured(how.request_id), True
    else:
        if outcome.truncated:
            meta[TRUNCATED_META] = True
        structured, is_error = structured_content(outcome.value, wrap_arrays=how.legacy), False
    if outcome.replayed:
        meta[REPLAYED_META] = True
    return tool_result(structured, is_error=is_error, meta=meta)


def _rendered(
    outcome: AskHuman | PendingApproval | Delivered | TaskCreated, how: Rendering
) -> dict[str, Any]:
    match outcome:
        case Delivered(approval_id=approval_id, status=status, result=result):
            meta = {APPROVAL_ID_META: approval_id, APPROVAL_STATUS_META: status}
            return _answer(result, how, meta)
        case PendingApproval(approval_id=approval_id):
            structure = approval_required(how.path_prefix, how.workspace, how.agent, approval_id)
            value = tool_result(structure, is_error=False, meta=None)
            value["content"].append({"type": "text", "text": _CALL_AGAIN[how.language]})
            return value
        case AskHuman(message=message, request_state=state):
            form = {
                "method": "elicitation/create",
                "params": {
                    "mode": "form",
                    "message": message,
                    "requestedSchema": {"type": "object", "properties": {}},
                },
            }
            return {
                "resultType": "input_required",
                "inputRequests": {REQUEST_KEY: form},
                "requestState": state,
            }
        case TaskCreated(task=task):
            return task_result(task, how) | {"resultType": "task"}


def render(outcome: CallOutcome, how: Rendering) -> dict[str, Any]:
    """The tools/call result of ``outcome`` for the era of ``how``."""
    if isinstance(outcome, Completed | Failed):  # most calls: before the match's patterns
        value = _answer(outcome, how, {})
    else:
        value = _rendered(outcome, how)
    if not how.legacy:
        value.setdefault("resultType", "complete")
    return value


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def task_result(task: TaskView, how: Rendering) -> dict[str, Any]:
    """The tasks extension's DetailedTask (without ``resultType``)."""
    value: dict[str, Any] = {
        "taskId": task.id,
        "createdAt": _iso(task.created_at),
        "lastUpdatedAt": _iso(task.updated_at),
        "ttlMs": task.ttl_ms,
        "pollIntervalMs": POLL_INTERVAL_MS,
        "status": task.status,
        "statusMessage": task.message,
    }
    if task.finished is not None:
        value["result"] = render(delivered(task.finished, how.language), how)
    return value
