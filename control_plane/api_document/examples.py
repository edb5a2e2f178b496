"""A valid example of every admin API request body, keyed by the body's type
(docs/architecture.md, "The API document").

The document shows them under each body's media type, so a reader (and the
fuzzer's first phase) has one request that works. The operation-file types
are here; a body type of the control plane's own registers its example next
to its definition with :func:`body_example`. ``document_routes`` refuses to
start an app with a body route whose type has none, and
tests/control_plane/api/test_openapi_document.py decodes each one into its
type and validates it as the route does.
"""

from __future__ import annotations

from typing import Any

from litestar.openapi.spec import Example

from shared.engine.spec import AgentSpec, CrankFile, OperationSpec, WebhookSpec

BODY_EXAMPLES: dict[type[Any], Example] = {}


def body_example(body_type: type[Any], summary: str, value: dict[str, Any]) -> None:
    """Register the example request body of ``body_type``."""
    BODY_EXAMPLES[body_type] = Example(summary=summary, value=value)


OPERATION: dict[str, Any] = {
    "name": "get_order",
    "title": "Get order",
    "description": "Gets one order by id. Use when the user asks about a specific order.",
    "input": {
        "type": "object",
        "properties": {"order_id": {"type": "string", "description": "The order id"}},
        "required": ["order_id"],
        "additionalProperties": False,
    },
    "request": {"method": "GET", "url": "https://api.example.com/orders/{order_id}"},
    "response": {"select": "{id: id, status: status}"},
}
AGENT: dict[str, Any] = {
    "slug": "support",
    "title": "Support",
    "description": "Answers questions about orders.",
    "operations": ["get_order"],
    "rate_limit": {"requests": 60, "per_seconds": 60},
}
WEBHOOK: dict[str, Any] = {
    "url": "https://hooks.example.com/crank",
    "events": ["approval.created", "approval.decided"],
    "format": "standard",
}

body_example(OperationSpec, "An operation that reads one order", OPERATION)
body_example(AgentSpec, "An agent exposing that operation", AGENT)
body_example(WebhookSpec, "A subscription to two approval events", WEBHOOK)
body_example(
    CrankFile,
    "An operation file: one operation and the agent that exposes it",
    {"operations": [OPERATION], "agents": [AGENT]},
)
