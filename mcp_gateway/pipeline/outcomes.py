"""What a tools/call comes to: a closed set of typed values (docs/architecture.md,
"The call outcome").

The pipeline returns one of them; transport renders each once for its protocol
era (mcp_gateway.transport.results), the call log and traces read the same value
(``code``). Nothing reads a rendered answer back.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from mcp_gateway.approvals.store import FinishedApproval
from mcp_gateway.approvals.tasks import TaskView
from shared.engine.errors import (
    ERROR_CODES,
    Language,
    ToolError,
    approval_denied,
    suggested_action,
)


class Completed(msgspec.Struct, frozen=True):
    """The upstream's selected answer."""

    value: Any
    truncated: bool = False  # cut to fit the operation's limits
    replayed: bool = False  # the idempotency memory's stored answer, no upstream call


class Failed(msgspec.Struct, frozen=True):
    """A tool error the model can act on."""

    error: ToolError
    replayed: bool = False  # a stored upstream error answered again


class AskHuman(msgspec.Struct, frozen=True):
    """A 2026-07-28 client asks its user to confirm (mcp_gateway.pipeline.elicitation)."""

    message: str  # the form's words
    request_state: str  # the signed ``rs_`` value the retry brings back


class PendingApproval(msgspec.Struct, frozen=True):
    """The call waits for a human's approval (the seed's ``approval_required``)."""

    approval_id: str


class Delivered(msgspec.Struct, frozen=True):
    """A finished approval's outcome, handed to a repeat of its call once."""

    approval_id: str
    status: Literal["completed", "failed", "denied", "expired"]
    result: Completed | Failed


class TaskCreated(msgspec.Struct, frozen=True):
    """A pending approval answered as a task of the tasks extension."""

    task: TaskView


CallOutcome = Completed | Failed | AskHuman | PendingApproval | Delivered | TaskCreated


def code(outcome: CallOutcome) -> tuple[str, str | None]:
    """(call log outcome, approval id): "ok", an error code, ``confirmation_required``,
    ``approval_required`` or ``approval_<status>`` for a delivered outcome."""
    match outcome:
        case Completed():
            return "ok", None
        case Failed(error=error):
            return error.error_code, None
        case AskHuman():
            return "confirmation_required", None
        case PendingApproval(approval_id=approval_id):
            return "approval_required", approval_id
        case Delivered(approval_id=approval_id, status=status):
            return f"approval_{status}", approval_id
        case TaskCreated(task=task):
            return "approval_required", task.id


def is_error(outcome: CallOutcome) -> bool:
    """Whether the model gets ``isError: true``."""
    if isinstance(outcome, Delivered):
        outcome = outcome.result
    return isinstance(outcome, Failed)


def delivered(finished: FinishedApproval, language: Language) -> Delivered:
    """The outcome a finished approval hands over (docs/architecture.md, "Approval outcomes"):

    - ``completed``: the selected result the worker recorded, as a direct call's;
    - ``failed``: the closed-list tool error recorded in ``response_payload``, with its
      ``recoverable`` flag and suggested action; the upstream's text stays in the
      record, never in the model's message;
    - ``denied``: ``approval_denied`` with the approver's note;
    - ``expired``: ``approval_expired``, whose suggested action is to call again.
    """
    result: Completed | Failed
    if finished.status == "completed":
        result = Completed(finished.response_payload, truncated=finished.result_truncated)
    else:
        result = Failed(_error(finished, language))
    return Delivered(finished.id, finished.status, result)


def _error(finished: FinishedApproval, language: Language) -> ToolError:
    if finished.status == "denied":
        return approval_denied(finished.note, language=language)
    if finished.status == "expired":
        return ToolError.of("approval_expired", language=language)
    payload = finished.response_payload
    error_code = payload.get("error_code") if isinstance(payload, dict) else None
    message = payload.get("message") if isinstance(payload, dict) else None
    if error_code not in ERROR_CODES or not isinstance(message, str):  # never written so
        return ToolError.of("internal_error", language=language)
    return ToolError(error_code, message, suggested_action=suggested_action(error_code, language))
