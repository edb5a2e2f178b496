"""The gateway's idempotency memory, per (agent, operation, idempotency key).

``run`` claims the key in ``idempotency_records``, answers a repeat from the record
(replay, conflict or in progress) and settles the record by how the upstream call
ended (docs/architecture.md, "Idempotency memory").
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import structlog
from psycopg.types.json import Jsonb

from mcp_gateway.catalog.snapshot import Tool
from mcp_gateway.pipeline.context import ToolCallContext
from mcp_gateway.pipeline.outcomes import Completed, Failed
from mcp_gateway.vocabulary.results import TRUNCATED_META
from shared.db import without_nul
from shared.engine.canonical import arguments_hash
from shared.engine.errors import ToolError
from shared.engine.upstream import UpstreamFailure

log = structlog.get_logger(__name__)

LOCK_MARGIN_S = 30.0  # beyond the longest the executor can take; also the unknown-outcome lock
IN_FLIGHT_RETRY_S = 5  # retry_after_s cap while the first call is still running
_CLAIM_TRIES = 3  # the row can vanish or unlock between the two statements


_CLAIM = """
INSERT INTO idempotency_records AS r
    (agent_id, operation_id, key_hash, arguments_hash, status, claim, locked_until, expires_at)
VALUES (%(agent_id)s, %(operation_id)s, %(key_hash)s, %(arguments_hash)s, 'in_progress',
        %(claim)s, now() + make_interval(secs => %(lock_s)s),
        now() + make_interval(secs => greatest(%(lock_s)s, %(retention_s)s)))
ON CONFLICT (agent_id, operation_id, key_hash) DO UPDATE
   SET arguments_hash = EXCLUDED.arguments_hash, status = 'in_progress', claim = EXCLUDED.claim,
       locked_until = EXCLUDED.locked_until, result = NULL, created_at = now(),
       expires_at = EXCLUDED.expires_at
 WHERE r.expires_at <= now()
    OR (r.status <> 'completed' AND r.locked_until <= now()
        AND r.arguments_hash = EXCLUDED.arguments_hash)
RETURNING true AS claimed
"""

_READ = """
SELECT status, arguments_hash, result, expires_at <= now() AS expired,
       extract(epoch FROM locked_until - now())::float8 AS locked_for_s
  FROM idempotency_records
 WHERE agent_id = %(agent_id)s AND operation_id = %(operation_id)s AND key_hash = %(key_hash)s
"""

_FENCE = """
 WHERE agent_id = %(agent_id)s AND operation_id = %(operation_id)s AND key_hash = %(key_hash)s
   AND claim = %(claim)s AND status = 'in_progress'
"""

_COMPLETE = (
    """
UPDATE idempotency_records
   SET status = 'completed', result = %(result)s, locked_until = NULL,
       expires_at = now() + make_interval(secs => %(retention_s)s)"""
    + _FENCE
)

_UNKNOWN = (
    """
UPDATE idempotency_records
   SET status = 'unknown',
       locked_until = greatest(locked_until, now() + make_interval(secs => %(margin_s)s))"""
    + _FENCE
)

_RELEASE = "DELETE FROM idempotency_records" + _FENCE


def lock_seconds(tool: Tool) -> float:
    execution = tool.spec.execution_config
    return execution.timeout_ms / 1000 * (execution.retries + 1) + LOCK_MARGIN_S


def _settled(exc: ToolError) -> str:
    """The statement that ends a record whose call failed with ``exc``."""
    # A tool error without an UpstreamFailure's delivery came from the answer.
    delivery = exc.delivery if isinstance(exc, UpstreamFailure) else "answered"
    if delivery == "not_sent":  # the guard refused, or the only connect was refused
        return _RELEASE
    if delivery == "unknown" or exc.error_code == "internal_error":
        return _UNKNOWN
    if exc.transient:  # 408, 429, 5xx: the upstream asks for a retry
        return _RELEASE
    return _COMPLETE  # a 4xx, an unreadable or oversized answer: the same again


class _Record:
    """The statements of one call's record."""

    def __init__(self, ctx: ToolCallContext, tool: Tool, key: str, digest: bytes) -> None:
        self.pool = ctx.pool
        self.tool = tool.name
        self.params: dict[str, Any] = {
            "agent_id": ctx.agent.id,
            "operation_id": tool.operation_id,
            "key_hash": hashlib.sha256(key.encode()).digest(),
            "arguments_hash": digest,
            "claim": os.urandom(16),
            "lock_s": lock_seconds(tool),
            "retention_s": ctx.parts.settings.idempotency_retention_s,
            "margin_s": LOCK_MARGIN_S,
        }

    async def claim(self) -> dict[str, Any] | None:
        """None when this call owns the key now; else the row it found."""
        for _ in range(_CLAIM_TRIES):
            async with self.pool.connection() as conn:
                if await (await conn.execute(_CLAIM, self.params)).fetchone():
                    return None
                row = await (await conn.execute(_READ, self.params)).fetchone()
            if row is None or row["expired"]:
                continue  # released or forgotten in between: claim again
            if row["arguments_hash"] == self.params["arguments_hash"]:
                locked_for = row["locked_for_s"]
                if row["status"] != "completed" and locked_for is not None and locked_for <= 0:
                    continue  # the lock ran out in between
            return dict(row)
        return {"status": "in_progress", "arguments_hash": self.params["arguments_hash"]}

    async def finish(self, statement: str, **extra: Any) -> None:
        """Never fails the call: the upstream has answered, the model gets its result."""
        try:
            async with self.pool.connection() as conn:
                cur = await conn.execute(statement, self.params | extra)
                if cur.rowcount != 1:
                    # Its lock ran out and another call claimed the key (or it expired).
                    log.warning("idempotency_claim_lost", tool=self.tool)
        except psycopg.Error as exc:
            log.warning("idempotency_record_not_saved", tool=self.tool, error=str(exc))


def _answer_existing(
    ctx: ToolCallContext, tool: Tool, row: dict[str, Any], digest: bytes
) -> Completed | Failed:
    """The replay of a completed record, or the error for a conflict or a locked key."""
    language = ctx.language
    if row["arguments_hash"] != digest:
        raise ToolError.of("idempotency_conflict", language=language)
    if row["status"] == "completed":
        stored: dict[str, Any] = row["result"]
        log.info("idempotency_replayed", tool=tool.name)
        error = stored.get("error")
        if error is not None:
            replayed = ToolError(
                error["error_code"],
                error["message"],
                suggested_action=error["suggested_action"],
                details={"replayed": True},
            )
            return Failed(replayed, replayed=True)
        truncated = bool((stored.get("meta") or {}).get(TRUNCATED_META))
        return Completed(stored["value"], truncated=truncated, replayed=True)
    remaining = math.ceil(row.get("locked_for_s") or 1)
    if row["status"] == "in_progress":
        remaining = min(remaining, IN_FLIGHT_RETRY_S)
    raise ToolError.of(
        "idempotency_in_progress", language=language, retry_after_s=max(1, remaining)
    )


async def run(
    ctx: ToolCallContext,
    tool: Tool,
    arguments: dict[str, Any],
    key: str,
    execute: Callable[[], Awaitable[Completed]],
) -> Completed | Failed:
    """The outcome of ``execute()``, or the stored one for a repeat of the same call
    (marked as replayed); raises idempotency_conflict / idempotency_in_progress."""
    digest = arguments_hash(arguments)
    record = _Record(ctx, tool, key, digest)
    existing = await record.claim()
    if existing is not None:
        return _answer_existing(ctx, tool, existing, digest)
    try:
        result = await execute()
    except ToolError as exc:
        statement = _settled(exc)
        if statement is _COMPLETE:
            await record.finish(_COMPLETE, result=Jsonb(without_nul({"error": _stored_error(exc)})))
        else:
            if statement is _UNKNOWN:
                log.info("idempotency_outcome_unknown", tool=tool.name, error_code=exc.error_code)
            await record.finish(statement)
        raise
    # Anything else (a bug, a cancelled call) leaves the row in_progress until its lock expires.
    # Stored as the 2025-era wrapping never was (a replay fits either era), the marker in
    # the shape records have always had.
    meta = {TRUNCATED_META: True} if result.truncated else None
    stored = without_nul({"value": result.value, "meta": meta})
    await record.finish(_COMPLETE, result=Jsonb(stored))
    return result


def _stored_error(exc: ToolError) -> dict[str, Any]:
    return {
        "error_code": exc.error_code,
        "message": exc.message,
        "suggested_action": exc.suggested_action,
    }
