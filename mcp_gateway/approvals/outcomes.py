"""A finished approval's outcome as the tool result its call's repeat gets, once
(docs/architecture.md, "Approval outcomes").

- ``completed``: the operation's success result, made from ``response_payload``
  (the selected result the worker recorded) by the same function a direct call
  uses (``success_result``: arrays wrapped for the 2025 revisions), marked
  ``crank/truncated`` when the worker cut it to fit, as a direct call is;
- ``failed``: the closed-list tool error recorded in ``response_payload``
  (``{error_code, message, upstream_status, upstream_text}``), with its
  ``recoverable`` flag and suggested action from shared.engine.errors; the
  upstream's text stays in the record, never in the model's message;
- ``denied``: ``approval_denied`` with the approver's note;
- ``expired``: ``approval_expired``, whose suggested action is to call again.

Every one carries ``crank/approval_id`` and ``crank/approval_status`` in
``_meta``; tools/call reads them back (``delivered``) for its call log row.
"""

from __future__ import annotations

from typing import Any

from mcp_gateway.approvals.store import FinishedApproval
from mcp_gateway.pipeline.results import TRUNCATED_META, success_result, tool_result
from shared.engine.errors import (
    ERROR_CODES,
    Language,
    ToolError,
    approval_denied,
    suggested_action,
)

APPROVAL_ID_META = "crank/approval_id"
APPROVAL_STATUS_META = "crank/approval_status"


def outcome_result(
    finished: FinishedApproval, *, language: Language, request_id: str, wrap_arrays: bool
) -> dict[str, Any]:
    """The tool result that delivers ``finished``'s outcome."""
    meta: dict[str, Any] = {APPROVAL_ID_META: finished.id, APPROVAL_STATUS_META: finished.status}
    if finished.status == "completed":
        if finished.result_truncated:
            meta[TRUNCATED_META] = True
        return success_result(finished.response_payload, wrap_arrays=wrap_arrays, meta=meta)
    error = _error(finished, language)
    error.request_id = request_id
    return tool_result(error.to_structured(), is_error=True, meta=meta)


def _error(finished: FinishedApproval, language: Language) -> ToolError:
    if finished.status == "denied":
        return approval_denied(finished.note, language=language)
    if finished.status == "expired":
        return ToolError.of("approval_expired", language=language)
    payload = finished.response_payload
    code = payload.get("error_code") if isinstance(payload, dict) else None
    message = payload.get("message") if isinstance(payload, dict) else None
    if code not in ERROR_CODES or not isinstance(message, str):  # never written so; be safe
        return ToolError.of("internal_error", language=language)
    return ToolError(code, message, suggested_action=suggested_action(code, language))


def delivered(result: dict[str, Any]) -> tuple[str, str] | None:
    """(call log outcome, approval id) of a result ``outcome_result`` made, else None.
    The outcome says which one the model got: ``approval_completed``,
    ``approval_failed``, ``approval_denied`` or ``approval_expired``."""
    meta = result.get("_meta") or {}
    approval_id, status = meta.get(APPROVAL_ID_META), meta.get(APPROVAL_STATUS_META)
    if approval_id is None or status is None:
        return None
    return f"approval_{status}", approval_id
