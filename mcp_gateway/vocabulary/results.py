"""The shape of a tools/call result: ``structuredContent`` plus its text copy, markers
in ``_meta`` (docs/architecture.md, "The call outcome")."""

from __future__ import annotations

from typing import Any

from mcp_gateway.vocabulary.jsonrpc import encode

TRUNCATED_META = "crank/truncated"  # the selected result was cut to fit the operation's limits
REPLAYED_META = "crank/replayed"  # the idempotency memory's stored answer
APPROVAL_ID_META = "crank/approval_id"  # a delivered approval outcome: which approval
APPROVAL_STATUS_META = "crank/approval_status"


def tool_result(structured: Any, *, is_error: bool, meta: dict[str, Any] | None) -> dict[str, Any]:
    """A tools/call result: ``structuredContent`` plus its text copy, markers in ``_meta``."""
    value: dict[str, Any] = {
        "content": [{"type": "text", "text": encode(structured).decode()}],
        "structuredContent": structured,
        "isError": is_error,
    }
    if meta:
        value["_meta"] = meta
    return value
