"""Reading the call log the gateways write (mcp_gateway.upkeep.call_log): newest
first, keyset pagination on ``id``, filters by agent, tool, outcome, time range
(``since`` inclusive, ``until`` exclusive), request id and the principal (issuer,
subject: who signed in with a token, docs/architecture.md, "Identity"). A call
the approval worker ran, and the tools/call that asked for that approval,
carry its ``approval_id``.

The log keeps ids, not names, and has no foreign keys (a row outlives the
agent or key it names), so the agent slug and key prefix are looked up at read
time and are null once that agent or key is deleted. The cursor is the
audit log's (opaque, over ``id``).
"""

from __future__ import annotations

import re
from datetime import datetime

import msgspec

from control_plane.errors import ValidationFailed
from control_plane.services.audit_query import decode_cursor, encode_cursor, time_range_problems
from shared.db import Connection
from shared.engine.errors import ERROR_CODES
from shared.engine.spec_validation import SLUG, TOOL_NAME, FieldError
from shared.principals import PrincipalRecord

REQUEST_ID = re.compile(r"req_[0-9a-f]{16}")  # the gateway's request ids
DEFAULT_LIMIT = 100
MAX_LIMIT = 500
# approval_completed and approval_failed: a repeat call got a finished approval's outcome
# (docs/architecture.md, "Approval outcomes"); a denied or expired one is logged by its code.
OUTCOMES = frozenset(
    {"ok", "approval_required", "approval_completed", "approval_failed", *ERROR_CODES}
)


class CallEntry(msgspec.Struct, kw_only=True):
    id: int
    called_at: datetime
    agent: str | None  # slug; null once the agent is deleted
    key_prefix: str | None  # null once the key is deleted
    request_id: str
    tool: str
    tool_version: int | None
    outcome: (
        str  # "ok", "approval_required", "approval_completed", "approval_failed" or an error code
    )
    upstream_status: int | None
    attempts: int
    duration_ms: float
    upstream_ms: float | None
    approval_id: str | None  # the approval this call created, ran or got the outcome of
    # Who signed in, when a token authenticated (null for a key's call); never the token.
    principal_issuer: str | None
    principal_subject: str | None
    principal_name: str | None  # the token's display name then
    client_id: str | None  # the OAuth client it came through

    @property
    def person(self) -> PrincipalRecord | None:
        """The principal as the console shows it (not part of the API's entry)."""
        if self.principal_issuer is None or self.principal_subject is None:
            return None
        return PrincipalRecord(
            issuer=self.principal_issuer,
            subject=self.principal_subject,
            name=self.principal_name,
            client_id=self.client_id,
        )


class CallPage(msgspec.Struct, kw_only=True):
    """One page, newest first; ``next_cursor`` is None on the last page."""

    items: list[CallEntry]
    next_cursor: str | None


class CallFilters(msgspec.Struct, kw_only=True):
    """Optional filters of the call log: agent slug, tool name, outcome ("ok" or an error
    code), a time range, a request id and the principal's issuer and subject (exact)."""

    agent: str | None = None
    tool: str | None = None
    outcome: str | None = None
    since: datetime | None = None  # called at or after
    until: datetime | None = None  # called before
    request_id: str | None = None
    principal_issuer: str | None = None
    principal_subject: str | None = None


# An issuer is a URL and a subject an IdP's identifier: neither comes near this in
# practice, and a filter needs no more (the call log stores what the token said).
MAX_PRINCIPAL_CHARS = 1000


def _principal_problem(name: str, value: str | None) -> FieldError | None:
    if value is None:
        return None
    if not value:
        return FieldError(name, "must not be empty")
    if len(value) > MAX_PRINCIPAL_CHARS:
        return FieldError(name, f"at most {MAX_PRINCIPAL_CHARS} characters")
    if "\x00" in value:
        return FieldError(name, "must not contain NUL characters")
    return None


def _check(filters: CallFilters, limit: int) -> None:
    problems: list[FieldError] = []
    if not 1 <= limit <= MAX_LIMIT:
        problems.append(FieldError("limit", f"must be between 1 and {MAX_LIMIT}"))
    if filters.agent is not None and not SLUG.fullmatch(filters.agent):
        problems.append(FieldError("agent", "not an agent slug"))
    if filters.tool is not None and not TOOL_NAME.fullmatch(filters.tool):
        problems.append(FieldError("tool", "not a tool name"))
    if filters.outcome is not None and filters.outcome not in OUTCOMES:
        problems.append(
            FieldError(
                "outcome", "must be ok, an approval_ outcome of the call log or an error code"
            )
        )
    if filters.request_id is not None and not REQUEST_ID.fullmatch(filters.request_id):
        problems.append(FieldError("request_id", "not a request id (req_ and 16 hex digits)"))
    for name in ("principal_issuer", "principal_subject"):
        problem = _principal_problem(name, getattr(filters, name))
        if problem is not None:
            problems.append(problem)
    problems.extend(time_range_problems(filters.since, filters.until))
    if problems:
        raise ValidationFailed(problems)


async def list_calls(
    conn: Connection,
    workspace_id: int,
    filters: CallFilters,
    *,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
) -> CallPage:
    """One page of the workspace's call log; raises ValidationFailed for a bad filter or cursor."""
    _check(filters, limit)
    before = decode_cursor(cursor) if cursor else None
    cur = await conn.execute(
        """SELECT c.id, c.called_at, a.slug AS agent, k.prefix AS key_prefix, c.request_id,
                  c.tool, c.tool_version, c.outcome, c.upstream_status, c.attempts,
                  c.duration_ms, c.upstream_ms, c.approval_id, c.principal_issuer,
                  c.principal_subject, c.principal_name, c.client_id
             FROM call_log c
             LEFT JOIN agents a ON a.id = c.agent_id
             LEFT JOIN api_keys k ON k.id = c.key_id
            WHERE c.workspace_id = %(ws)s
              AND (%(before)s::bigint IS NULL OR c.id < %(before)s)
              AND (%(agent)s::text IS NULL OR c.agent_id = (
                     SELECT id FROM agents WHERE workspace_id = %(ws)s AND slug = %(agent)s))
              AND (%(tool)s::text IS NULL OR c.tool = %(tool)s)
              AND (%(outcome)s::text IS NULL OR c.outcome = %(outcome)s)
              AND (%(since)s::timestamptz IS NULL OR c.called_at >= %(since)s)
              AND (%(until)s::timestamptz IS NULL OR c.called_at < %(until)s)
              AND (%(request_id)s::text IS NULL OR c.request_id = %(request_id)s)
              AND (%(issuer)s::text IS NULL OR c.principal_issuer = %(issuer)s)
              AND (%(subject)s::text IS NULL OR c.principal_subject = %(subject)s)
            ORDER BY c.id DESC
            LIMIT %(limit)s""",
        {
            "ws": workspace_id,
            "before": before,
            "agent": filters.agent,
            "tool": filters.tool,
            "outcome": filters.outcome,
            "since": filters.since,
            "until": filters.until,
            "request_id": filters.request_id,
            "issuer": filters.principal_issuer,
            "subject": filters.principal_subject,
            "limit": limit + 1,
        },
    )
    rows = await cur.fetchall()
    items = [CallEntry(**row) for row in rows[:limit]]
    next_cursor = encode_cursor(items[-1].id) if len(rows) > limit else None
    return CallPage(items=items, next_cursor=next_cursor)
