"""The call log: one row per tools/call and approved call, written in batches off the hot path.

``CallLogWriter.record`` buffers a row (no I/O); a background loop writes the buffer
with one binary ``COPY`` per flush (docs/architecture.md, "The call log").
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from datetime import datetime
from typing import NamedTuple

import psycopg
import structlog
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.upkeep.metrics import CALL_LOG_DROPPED
from shared.db import Connection, within
from shared.periodic import PeriodicTask

log = structlog.get_logger(__name__)

MAX_BUFFERED = 50_000
FLUSH_TIMEOUT_S = 10.0  # one attempt; the next interval tries again
_ROWS_PER_SLICE = 200  # rows formatted between two yields to the event loop


class CallRecord(NamedTuple):
    """One ``call_log`` row, in column order: the tuple goes to ``COPY`` as it is."""

    called_at: datetime
    workspace_id: int
    agent_id: int
    key_id: int | None  # the agent key that asked; an approval row may not name it
    request_id: str
    tool: str
    tool_version: int | None
    outcome: str  # "ok" or an error code of shared.engine.errors
    upstream_status: int | None  # None when no HTTP answer came back
    attempts: int
    duration_ms: float  # the whole tools/call, or the whole run of an approved call
    upstream_ms: float | None  # None when the upstream was not called
    approval_id: str | None = None  # the approval this call created or ran
    # Who signed in, when a token authenticated (all None for a key's call):
    # docs/architecture.md, "Identity". Never the token.
    principal_issuer: str | None = None
    principal_subject: str | None = None
    principal_name: str | None = None
    client_id: str | None = None


_COPY = (
    "COPY call_log (called_at, workspace_id, agent_id, key_id, request_id, tool,"
    " tool_version, outcome, upstream_status, attempts, duration_ms, upstream_ms,"
    " approval_id, principal_issuer, principal_subject, principal_name, client_id)"
    " FROM STDIN (FORMAT BINARY)"
)
_TYPES = [
    "timestamptz",
    "int8",
    "int8",
    "int8",
    "text",
    "text",
    "int4",
    "text",
    "int4",
    "int4",
    "float8",
    "float8",
    "text",
    "text",
    "text",
    "text",
    "text",
]


class CallLogWriter:
    """``record`` buffers a row; a loop between ``start`` and ``stop`` writes them in batches."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        *,
        interval_s: float = 1.0,
        max_buffered: int = MAX_BUFFERED,
        flush_timeout_s: float = FLUSH_TIMEOUT_S,
    ) -> None:
        self._pool = pool
        self._max = max_buffered
        self._flush_timeout_s = flush_timeout_s
        self._buffer: deque[CallRecord] = deque(maxlen=max_buffered)
        self._dropped_unreported = 0
        # Retries after a failed flush back off from one interval to eight.
        self._flusher = PeriodicTask("call_log_flush", self._flush_in_loop, interval_s=interval_s)

    @property
    def buffered(self) -> int:
        return len(self._buffer)

    def record(self, row: CallRecord) -> None:
        """Buffer one row; when the buffer is full the oldest row makes room."""
        if len(self._buffer) == self._max:
            self._dropped(1)
        self._buffer.append(row)  # the deque's maxlen drops the oldest

    async def flush(self) -> int:
        """Write the buffered rows in one statement; returns how many.

        On failure the rows go back in front of those recorded meanwhile
        (oldest dropped if they no longer fit) and the error propagates.
        """
        if not self._buffer:
            return 0
        batch, self._buffer = self._buffer, deque(maxlen=self._max)
        try:
            await within(self._flush_timeout_s, self._copy(batch))
        except psycopg.DataError:
            self._dropped(len(batch))
            raise
        except BaseException:
            self._requeue(batch)
            raise
        return len(batch)

    async def _copy(self, batch: deque[CallRecord]) -> None:
        async with self._pool.connection() as conn, conn.cursor() as cur:
            async with cur.copy(_COPY) as copy:
                copy.set_types(_TYPES)
                for index, row in enumerate(batch, 1):
                    await copy.write_row(row)
                    if index % _ROWS_PER_SLICE == 0:
                        # Formatting a second's rows at 1,000 calls/s takes milliseconds
                        # of the loop: let the requests waiting meanwhile go first.
                        await asyncio.sleep(0)
            if not conn.autocommit:
                await conn.commit()

    def _requeue(self, batch: deque[CallRecord]) -> None:
        # A new deque: an abandoned COPY task may still hold ``batch``.
        excess = max(0, len(batch) + len(self._buffer) - self._max)
        if excess:
            self._dropped(excess)
        kept: deque[CallRecord] = deque(itertools.islice(batch, excess, None), maxlen=self._max)
        kept.extend(self._buffer)
        self._buffer = kept

    def _dropped(self, count: int) -> None:
        CALL_LOG_DROPPED.inc(count)
        self._dropped_unreported += count

    def _report_drops(self) -> None:
        if self._dropped_unreported:
            log.warning("call_log_rows_dropped", count=self._dropped_unreported, limit=self._max)
            self._dropped_unreported = 0

    async def _flush_in_loop(self) -> None:
        """The background loop's run: what ``flush`` raises, the loop logs and
        counts, except a refused batch, which is already dropped and counted."""
        try:
            await self.flush()
        except psycopg.DataError:
            log.exception("call_log_batch_refused")
        finally:
            self._report_drops()

    def start(self) -> None:
        self._flusher.start()

    async def stop(self) -> None:
        """Finish the flush in progress (never cancelled mid-COPY: a cancelled
        COPY that did commit would be written twice), then write what is left."""
        try:
            await self._flusher.stop(wait_s=None, final_run=True)
        except Exception:  # the loop's final run: the rows it left are reported below
            log.exception("call_log_final_flush_failed")
        if self._buffer:
            log.warning("call_log_rows_lost_on_stop", count=len(self._buffer))
