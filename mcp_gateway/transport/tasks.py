"""The 2026-07-28 tasks extension's methods (``io.modelcontextprotocol/tasks``;
docs/architecture.md, "Tasks"): ``tasks/get``, ``tasks/update`` and
``tasks/cancel`` on approvals (mcp_gateway.approvals.tasks).

``tasks/cancel`` denies a pending approval and nothing else; its answer, like
``tasks/update``'s, is the extension's empty acknowledgement (no input is ever
asked for).
"""

from __future__ import annotations

from typing import Any, Literal, cast

from mcp_gateway.approvals import tasks as approval_tasks
from mcp_gateway.transport.errors import MethodError
from mcp_gateway.transport.exchange import Exchange
from mcp_gateway.transport.results import task_result
from mcp_gateway.vocabulary.jsonrpc import INVALID_PARAMS, MISSING_CAPABILITY, Message
from mcp_gateway.vocabulary.versions import META_CAPABILITIES

EXTENSION = "io.modelcontextprotocol/tasks"
METHODS = frozenset(("tasks/get", "tasks/update", "tasks/cancel"))


def declares_tasks(meta: Any) -> bool:
    """Whether a request's ``_meta`` declares the extension (an object under
    ``clientCapabilities.extensions``)."""
    capabilities = meta.get(META_CAPABILITIES) if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)


async def serve(exchange: Exchange, message: Message, legacy: bool) -> dict[str, Any]:
    """The result of a tasks method (without ``resultType`` and ``_meta``)."""
    if not declares_tasks(message.meta):
        raise MethodError(
            MISSING_CAPABILITY,
            "Missing required client capability",
            data={"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
            status=400,
        )
    method = cast(Literal["tasks/get", "tasks/update", "tasks/cancel"], message.method)
    task_id = message.params.get("taskId")
    agent, settings = exchange.agent, exchange.state.settings
    try:
        task = await approval_tasks.serve(
            exchange.state.pool,
            agent.id,
            f"{agent.workspace}/{agent.slug}",
            method,
            task_id if isinstance(task_id, str) else "",
            settings.approval_outcome_retention_s,
            settings.language,
        )
    except approval_tasks.TaskGone as gone:
        raise MethodError(INVALID_PARAMS, f"Failed to retrieve task: {gone}", status=400) from None
    if method != "tasks/get":
        return {}
    return task_result(task, exchange.rendering(legacy))
