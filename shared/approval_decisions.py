"""Deciding a pending approval: the one statement both processes run.

An approval key decides through the gateway's endpoints, an owner through the
console; both call ``decide_or_status`` (docs/architecture.md, "Approval
decisions"). The transition's rules are the database's (the
``approvals_transition`` trigger, docs/architecture.md, "Approval state
machine"): the statement asks for ``status = 'pending'`` and a row not past
its time, and reads the outcome from ``RETURNING``. The audit row is written
by the same statement.

After an approval commits, the gateways' workers are woken with ``NOTIFY
crank_approvals`` (``notify_approved``); the gateway coalesces many decisions
into one (mcp_gateway.approvals.wakeups), the console sends it in the
deciding transaction, delivered at commit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from shared.approval_records import (
    JOINED_COLUMNS,
    RECORD_COLUMNS,
    ApprovalRecord,
    record_joins,
    record_of,
)
from shared.db import Connection

CHANNEL = "crank_approvals"  # NOTIFY after an approval commits; the payload is ignored
MAX_NOTE_CHARS = 2000  # an approver's note, whoever decides
# Who asked for the call, in a decision's audit details: the person a token
# named, or the agent key (docs/architecture.md, "Identity").
REQUESTER_JSON = """CASE WHEN principal_subject IS NULL THEN jsonb_build_object('key_id', key_id)
    ELSE jsonb_build_object('issuer', principal_issuer, 'subject', principal_subject,
                            'name', principal_name, 'client_id', client_id) END"""


@dataclass(frozen=True, slots=True)
class Decision:
    approval_id: str
    agent_id: int  # the statement is scoped to this agent's rows
    agent: str  # workspace/agent, for the audit details
    status: Literal["approved", "denied"]
    decided_by: str  # an approval key's prefix, the console's admin, or a tasks/cancel
    note: str | None
    actor: str | None = None  # the audit row's actor; default: the approval key


async def decide(conn: Connection, decision: Decision) -> ApprovalRecord | None:
    """pending → approved | denied and its audit row, in one statement; None
    when the row is not pending (or not this agent's, or past its time). No
    NOTIFY here: the caller wakes the workers once the decision has committed."""
    cur = await conn.execute(
        f"""WITH decided AS (
                UPDATE approvals
                   SET status = %(status)s, decided_at = now(), decided_by = %(by)s, note = %(note)s
                 WHERE id = %(id)s AND agent_id = %(agent_id)s
                   AND status = 'pending' AND expires_at > now()
                RETURNING workspace_id, agent_id, operation_id, arguments_hash, {RECORD_COLUMNS}
            ), audited AS (
                INSERT INTO audit_log
                       (workspace_id, actor, action, resource_type, resource_name, details)
                SELECT workspace_id, %(actor)s, %(action)s, 'approval', id,
                       jsonb_build_object('note', note, 'tool', tool, 'version', version,
                                          'agent', %(agent)s::text,
                                          'requester', {REQUESTER_JSON})
                  FROM decided
            )
            SELECT {RECORD_COLUMNS}, {JOINED_COLUMNS} FROM decided d
                   {record_joins("d")}""",
        {
            "status": decision.status,
            "by": decision.decided_by,
            "note": decision.note,
            "id": decision.approval_id,
            "agent_id": decision.agent_id,
            "agent": decision.agent,
            "actor": decision.actor or f"approval key {decision.decided_by}…",
            "action": f"approval.{decision.status}",
        },
    )
    row = await cur.fetchone()
    return None if row is None else record_of(row)


async def expire(conn: Connection, agent_id: int, approval_id: str) -> None:
    """pending → expired for one row of this agent, if it is pending and past its time."""
    await conn.execute(
        """UPDATE approvals SET status = 'expired'
            WHERE id = %s AND agent_id = %s AND status = 'pending' AND expires_at <= now()""",
        (approval_id, agent_id),
    )


async def decide_or_status(conn: Connection, decision: Decision) -> ApprovalRecord | str | None:
    """The decided record; else the row's status now (a row past its time is expired
    first, so it says so): the 409 of the API; None when this agent has no such row."""
    record = await decide(conn, decision)
    if record is not None:
        return record
    await expire(conn, decision.agent_id, decision.approval_id)
    cur = await conn.execute(
        "SELECT status FROM approvals WHERE id = %s AND agent_id = %s",
        (decision.approval_id, decision.agent_id),
    )
    row = await cur.fetchone()
    return None if row is None else str(row["status"])


async def notify_approved(conn: Connection) -> None:
    """Wake every gateway's approval worker (sent when ``conn``'s transaction commits)."""
    await conn.execute(f"NOTIFY {CHANNEL}")
