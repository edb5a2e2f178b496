"""An approval as a task of the 2026-07-28 tasks extension: what a task shows
(docs/architecture.md, "Tasks"); mcp_gateway.transport.tasks serves the methods.

The task id is the approval id (128 random bits), so every replica answers
from the database alone; every look-up names the caller's agent, so another
agent's task is as unknown as a missing one.

- pending, approved, executing → ``working``, with plain words naming the approval;
- completed, failed, denied, expired → ``completed``, its result the very tool
  result a repeat call delivers; the first ``tasks/get`` that shows it marks the
  outcome delivered, and it stays readable until
  ``CRANK_APPROVAL_OUTCOME_RETENTION_S`` after it finished;
- denied by ``tasks/cancel`` (``decided_by`` = ``store.CANCELLED_BY``) → ``cancelled``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Literal

import msgspec
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals import store
from shared.db import Connection
from shared.engine.errors import Language

POLL_INTERVAL_MS = 5000  # a human decides in minutes; polling faster only costs queries
CANCEL_NOTE = "Cancelled by the client (tasks/cancel)"

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


class TaskView(msgspec.Struct, frozen=True, kw_only=True):
    """An approval as its task shows it; ``finished`` holds the outcome of a completed task."""

    id: str
    created_at: datetime
    updated_at: datetime
    ttl_ms: int  # from creation to the end of the outcome's retention
    status: Literal["working", "completed", "cancelled"]
    message: str
    finished: store.FinishedApproval | None = None


def view(row: store.TaskRow, retention_s: int, language: Language) -> TaskView:
    """What the task of ``row`` shows."""
    ends = row.finished_at or max(row.expires_at, datetime.now(UTC))
    # From creation to the end of the outcome's retention; it grows while a decision waits.
    ttl_ms = int((ends - row.created_at).total_seconds() * 1000) + retention_s * 1000
    words = {"id": row.id, "status": row.status}
    finished = None
    if row.finished_at is None:
        status: Literal["working", "completed", "cancelled"] = "working"
        message = _WORKING[language][row.status].format(**words)
    elif row.status == "denied" and row.decided_by == store.CANCELLED_BY:
        status, message = "cancelled", _CANCELLED[language].format(**words)
    else:
        status, message = "completed", _FINISHED[language].format(**words)
        finished = store.FinishedApproval(
            id=row.id,
            status=row.status,  # type: ignore[arg-type]  # finished_at: one of the four
            note=row.note,
            response_payload=row.response_payload,
            result_truncated=row.result_truncated,
        )
    return TaskView(
        id=row.id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        ttl_ms=ttl_ms,
        status=status,
        message=message,
        finished=finished,
    )


async def created(
    pool: AsyncConnectionPool[Connection],
    agent_id: int,
    approval_id: str,
    retention_s: int,
    language: Language,
) -> TaskView:
    """The task of the active approval ``approval_id`` the gate has just answered."""
    async with pool.connection() as conn:
        row = await store.task_row(conn, agent_id, approval_id, retention_s, deliver=False)
    if row is None:  # never: the gate has just written or found it
        raise LookupError(approval_id)
    return view(row, retention_s, language)


class TaskGone(LookupError):
    """No such task for this agent, or its outcome is past retention (``expired``)."""

    def __init__(self, expired: bool) -> None:
        super().__init__("Task has expired" if expired else "Task not found")
        self.expired = expired


async def serve(
    pool: AsyncConnectionPool[Connection],
    agent_id: int,
    agent_label: str,
    method: Literal["tasks/get", "tasks/update", "tasks/cancel"],
    task_id: str,
    retention_s: int,
    language: Language,
) -> TaskView:
    """The task after ``method``: ``tasks/cancel`` denies a pending approval and nothing
    else (cancellation is cooperative); ``tasks/get`` hands a finished outcome over.
    Raises TaskGone."""
    if not store.is_approval_id(task_id):
        raise TaskGone(expired=False)
    async with pool.connection() as conn:
        if method == "tasks/cancel":
            cancel = store.Decision(
                task_id,
                agent_id,
                agent_label,
                "denied",
                store.CANCELLED_BY,
                CANCEL_NOTE,
                actor="mcp client (tasks/cancel)",
            )
            await store.decide(conn, cancel)  # None: not pending; the ack stands
        await store.expire(conn, agent_id, task_id)  # a pending row past its time
        row = await store.task_row(
            conn, agent_id, task_id, retention_s, deliver=method == "tasks/get"
        )
    if row is None:
        raise TaskGone(expired=False)
    if not row.retained:
        raise TaskGone(expired=True)
    return view(row, retention_s, language)
