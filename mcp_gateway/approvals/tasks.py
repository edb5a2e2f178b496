"""An approval as a task of the 2026-07-28 tasks extension (``io.modelcontextprotocol/tasks``;
docs/architecture.md, "Tasks").

A client that declares the extension in the request's client capabilities gets,
for an approval-gated tools/call that would answer ``approval_required``, a
``CreateTaskResult`` instead. The task id is the approval id (128 random bits),
so every replica answers ``tasks/get``, ``tasks/update`` and ``tasks/cancel``
from the database alone; every look-up names the caller's agent, so another
agent's task is as unknown as a missing one.

- pending, approved, executing → ``working``, with plain words naming the approval;
- completed, failed, denied, expired → ``completed``, its ``result`` the very tool
  result a repeat call delivers (mcp_gateway.approvals.outcomes; a failed upstream
  call or a denial is a tool error with ``isError``, which the extension puts under
  ``completed``: its ``failed`` is for JSON-RPC errors only); the first ``tasks/get``
  that shows it marks the outcome delivered, and it stays readable until
  ``CRANK_APPROVAL_OUTCOME_RETENTION_S`` after it finished;
- denied by ``tasks/cancel`` (``decided_by`` = ``store.CANCELLED_BY``) → ``cancelled``.

``tasks/cancel`` denies a pending approval and nothing else: an approved or
running call goes on and a finished one stays as it is; the answer is the
extension's empty acknowledgement either way (cancellation is cooperative).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from mcp_gateway.approvals import store
from mcp_gateway.approvals.outcomes import outcome_result
from mcp_gateway.pipeline.context import ToolCallContext
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.exchange import Exchange
from mcp_gateway.transport.jsonrpc import INVALID_PARAMS, MISSING_CAPABILITY
from mcp_gateway.transport.versions import META_CAPABILITIES
from shared.engine.errors import Language

EXTENSION = "io.modelcontextprotocol/tasks"
METHODS = frozenset(("tasks/get", "tasks/update", "tasks/cancel"))
POLL_INTERVAL_MS = 5000  # a human decides in minutes; polling faster only costs queries
CANCEL_NOTE = "Cancelled by the client (tasks/cancel)"


def declares_tasks(meta: Any) -> bool:
    """Whether a request's ``_meta`` declares the extension (an object under
    ``clientCapabilities.extensions``)."""
    capabilities = meta.get(META_CAPABILITIES) if isinstance(meta, dict) else None
    extensions = capabilities.get("extensions") if isinstance(capabilities, dict) else None
    return isinstance(extensions, dict) and isinstance(extensions.get(EXTENSION), dict)


_WORKING: dict[Language, dict[str, str]] = {
    "en": {
        "pending": "Waiting for a human to approve or deny {id}; nothing has been done yet.",
        "approved": "{id} was approved by a human; the call runs shortly.",
        "executing": "{id} was approved by a human; the call is running.",
    },
    "ru": {
        "pending": "Ждём, пока человек одобрит или отклонит {id}; пока ничего не выполнено.",
        "approved": "Человек одобрил {id}; вызов скоро выполнится.",
        "executing": "Человек одобрил {id}; вызов выполняется.",
    },
}
_CANCELLED: dict[Language, str] = {
    "en": "Cancelled by the client: {id} was withdrawn and will not run.",
    "ru": "Отменено клиентом: заявка {id} отозвана и не будет выполнена.",
}
_FINISHED: dict[Language, str] = {
    "en": "{id} finished: {status}.",
    "ru": "Заявка {id} завершена: {status}.",
}


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _task(
    row: store.TaskRow, retention_s: int, language: Language, request_id: str
) -> dict[str, Any]:
    """The extension's DetailedTask for ``row`` (without ``resultType``)."""
    ends = row.finished_at or max(row.expires_at, datetime.now(UTC))
    task: dict[str, Any] = {
        "taskId": row.id,
        "createdAt": _iso(row.created_at),
        "lastUpdatedAt": _iso(row.updated_at),
        # From creation to the end of the outcome's retention; it grows while a decision waits.
        "ttlMs": int((ends - row.created_at).total_seconds() * 1000) + retention_s * 1000,
        "pollIntervalMs": POLL_INTERVAL_MS,
    }
    words = {"id": row.id, "status": row.status}
    if row.finished_at is None:
        task["status"] = "working"
        task["statusMessage"] = _WORKING[language][row.status].format(**words)
    elif row.status == "denied" and row.decided_by == store.CANCELLED_BY:
        task["status"] = "cancelled"
        task["statusMessage"] = _CANCELLED[language].format(**words)
    else:
        finished = store.FinishedApproval(
            id=row.id,
            status=row.status,
            note=row.note,
            response_payload=row.response_payload,
            result_truncated=row.result_truncated,
        )
        result = outcome_result(
            finished, language=language, request_id=request_id, wrap_arrays=False
        )
        result["resultType"] = "complete"
        task["status"] = "completed"
        task["statusMessage"] = _FINISHED[language].format(**words)
        task["result"] = result
    return task


async def created(ctx: ToolCallContext, approval_id: str) -> dict[str, Any]:
    """The ``CreateTaskResult`` for the active approval ``approval_id`` just answered."""
    async with ctx.pool.connection() as conn:
        row = await store.task_row(
            conn, ctx.agent.id, approval_id, ctx.approval_outcome_retention_s, deliver=False
        )
    if row is None:  # never: the gate has just written or found it
        raise LookupError(approval_id)
    task = _task(row, ctx.approval_outcome_retention_s, ctx.language, ctx.request_id)
    task["resultType"] = "task"
    return task


def _not_found(why: str) -> ProtocolError:
    return ProtocolError(400, f"Failed to retrieve task: {why}", code=INVALID_PARAMS)


async def serve(exchange: Exchange, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """The result of ``tasks/get``, ``tasks/update`` or ``tasks/cancel`` (without
    ``resultType`` and ``_meta``); ProtocolError for the extension's errors."""
    if not declares_tasks(params.get("_meta")):
        raise ProtocolError(
            400,
            "Missing required client capability",
            code=MISSING_CAPABILITY,
            data={"requiredCapabilities": {"extensions": {EXTENSION: {}}}},
        )
    task_id = params.get("taskId")
    if not isinstance(task_id, str) or not store.is_approval_id(task_id):
        raise _not_found("Task not found")
    agent, settings = exchange.agent, exchange.state.settings
    retention_s = settings.approval_outcome_retention_s
    async with exchange.state.pool.connection() as conn:
        if method == "tasks/cancel":
            cancel = store.Decision(
                task_id,
                agent.id,
                f"{agent.workspace}/{agent.slug}",
                "denied",
                store.CANCELLED_BY,
                CANCEL_NOTE,
                actor="mcp client (tasks/cancel)",
            )
            await store.decide(conn, cancel)  # None: not pending; the ack stands
        await store.expire(conn, agent.id, task_id)  # a pending row past its time
        row = await store.task_row(
            conn, agent.id, task_id, retention_s, deliver=method == "tasks/get"
        )
    if row is None:
        raise _not_found("Task not found")
    if not row.retained:
        raise _not_found("Task has expired")
    if method != "tasks/get":
        return {}  # the extension's empty acknowledgement (no input is ever asked for)
    return _task(row, retention_s, settings.language, exchange.request_id)
