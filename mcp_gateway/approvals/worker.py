"""The approval worker: runs approved calls, once, on any replica.

One ``ApprovalWorker`` per gateway process claims approved rows, runs each through
mcp_gateway.approvals.execution while renewing its lease, finishes it fenced
(mcp_gateway.approvals.finishing) and releases what still runs at shutdown
(docs/architecture.md, "Leases and fencing").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import structlog
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals import store
from mcp_gateway.approvals.execution import Deferred, Outcome, Performer, exhausted_payload
from mcp_gateway.approvals.finishing import Finisher
from mcp_gateway.approvals.store import Claimed, Finish
from mcp_gateway.approvals.wakeups import Wakeups
from mcp_gateway.catalog.snapshot import Snapshot
from mcp_gateway.upkeep.call_log import CallLogWriter
from shared.backoff import doubled
from shared.crypto import SecretBox
from shared.db import DB_TIMEOUT_S, Connection, within, without_nul
from shared.engine.errors import Language
from shared.engine.outbound import UpstreamExecutor
from shared.periodic import EXPECTED, PeriodicTask

log = structlog.get_logger(__name__)

CONCURRENCY = 32  # rows one process runs at once (CRANK_APPROVAL_WORKERS)
POLL_S = 1.0
LEASE_MARGIN_S = 10.0
SHUTDOWN_GRACE_S = 10.0
_RENEW_RETRY_S = 1.0
_STOP_TIMEOUT_S = 10.0  # after the grace: releases, or finishes already under way


@dataclass(slots=True)
class _Running:
    row: Claimed
    call: asyncio.Task[Outcome]
    valid_until: float  # loop time by which the lease, as last confirmed, runs out
    ending: Literal["", "lost", "released"] = ""


class ApprovalWorker:
    """One per gateway process: claims approved rows and runs them; ``wake`` starts a round now."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        executor: UpstreamExecutor,
        *,
        owner: str,
        snapshot: Callable[[], Snapshot],
        box: SecretBox | None,
        call_log: CallLogWriter,
        language: Language = "en",
        concurrency: int = CONCURRENCY,
        poll_s: float = POLL_S,
        margin_s: float = LEASE_MARGIN_S,
        renew_every_s: float | None = None,  # None: a third of each row's lease
    ) -> None:
        self.owner = owner  # lease_owner: this process (Replicas.replica_id)
        self._pool = pool
        self._performer = Performer(
            pool, executor, snapshot=snapshot, box=box, call_log=call_log, language=language
        )
        self._concurrency = concurrency
        self._margin_s = margin_s
        self._renew_every_s = renew_every_s
        self._exhausted = exhausted_payload(language)
        self._finisher = Finisher(pool, owner)
        self.wakeups = Wakeups(pool, self.wake)
        # Claim rounds repeat in the shared loop (shared.periodic): it logs a
        # database outage once and retries less often while it lasts; a wake-up
        # (a notification, the listener reconnecting, a freed slot) still runs a
        # round at once.
        self._claims = PeriodicTask("approval_claims", self._claim_round, interval_s=poll_s)
        self._more = False  # the last round filled every slot: there may be more rows
        self._tasks: set[asyncio.Task[None]] = set()
        self._running: dict[str, _Running] = {}

    @property
    def finish_statements(self) -> int:
        """Statements that wrote outcomes so far (one per batch; tests read it)."""
        return self._finisher.flushes

    @property
    def in_hand(self) -> int:
        """Claimed rows this process has not finished with."""
        return len(self._tasks)

    # -- lifecycle ---------------------------------------------------------

    def start(self) -> None:
        self._claims.start(first_delay_s=0)

    def wake(self) -> None:
        """A claim round now (a ``crank_approvals`` notification, whatever its payload, or a
        reconnected listener)."""
        self._claims.wake()

    def approved(self) -> None:
        """Rows were approved (committed): a round here now, a NOTIFY for the others."""
        self.wakeups.approved()

    def stop_claiming(self) -> None:
        """No new claims; running calls go on (the first step of a graceful stop)."""
        self._claims.request_stop()

    async def stop(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        """Stop claiming, give running calls ``grace_s`` to finish, release the rest."""
        await self._claims.stop(wait_s=DB_TIMEOUT_S)  # a round under way may finish
        await self.wakeups.stop()
        if not self._tasks:
            return
        _, pending = await asyncio.wait(set(self._tasks), timeout=grace_s)
        for running in list(self._running.values()):
            if not running.call.done():
                running.ending = "released"
                running.call.cancel()
        if pending:
            _, stuck = await asyncio.wait(pending, timeout=_STOP_TIMEOUT_S)
            for task in stuck:  # the database hangs: the leases will expire instead
                task.cancel()
            if stuck:
                await asyncio.wait(stuck)
        await self._finisher.stop()

    # -- claiming ----------------------------------------------------------

    async def claim_once(self) -> int:
        """One claim round (tests drive the worker with it); the rows started.

        A database error is logged, not raised.
        """
        try:
            return await self._claim_round()
        except EXPECTED as exc:
            log.warning("approval_claim_failed", error=str(exc) or type(exc).__name__)
            return 0

    async def _claim_round(self) -> int:
        """One claim round; raises what the database raised."""
        free = self._concurrency - len(self._tasks)
        if free <= 0:
            self._more = True  # a slot freeing up starts the next round
            return 0
        started = asyncio.get_running_loop().time()
        running, failed = await within(DB_TIMEOUT_S, self._claim(free))
        self._more = len(running) + len(failed) == free
        for row in failed:
            log.warning("approval_attempts_exhausted", approval_id=row.id, attempts=row.attempt)
        for row in running:
            self._start_row(row, started)
        return len(running)

    async def _claim(self, limit: int) -> tuple[list[Claimed], list[Claimed]]:
        async with self._pool.connection() as conn:
            return await store.claim(
                conn,
                owner=self.owner,
                limit=limit,
                margin_s=self._margin_s,
                exhausted=self._exhausted,
            )

    def _start_row(self, row: Claimed, claimed_at: float) -> None:
        log.info("approval_claimed", approval_id=row.id, attempt=row.attempt, tool=row.tool)
        call = asyncio.create_task(self._performer.perform(row), name=f"approval-call-{row.id}")
        self._running[row.id] = _Running(row, call, claimed_at + row.lease_s)
        task = asyncio.create_task(self._run(row.id), name=f"approval-{row.id}")
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._more:
            self._claims.wake()

    # -- one row -----------------------------------------------------------

    async def _run(self, approval_id: str) -> None:
        running = self._running[approval_id]
        row = running.row
        try:
            outcome = await self._watch(running)
            if outcome is not None:
                await self._finish(running, outcome)
            elif running.ending == "released":
                await self._release(row)
        except asyncio.CancelledError:
            running.call.cancel()
            raise
        except Exception:  # the top of one row's work: the lease will expire
            log.exception("approval_run_crashed", approval_id=row.id)
        finally:
            self._running.pop(approval_id, None)

    async def _watch(self, running: _Running) -> Outcome | None:
        """The call's outcome, renewing the lease meanwhile; None when it ended otherwise."""
        row, call = running.row, running.call
        loop = asyncio.get_running_loop()
        every = self._renew_every_s or row.lease_s / 3
        wait_s = every
        while not call.done():
            await asyncio.wait({call}, timeout=wait_s)
            if call.done() or running.ending:
                break
            asked = loop.time()
            try:
                kept = await within(DB_TIMEOUT_S, self._renew(row))
            except EXPECTED as exc:
                log.warning("approval_renew_failed", approval_id=row.id, error=str(exc))
                if running.valid_until - loop.time() < row.lease_s / 3:
                    self._lose(running, "renewal_failed")
                    break
                wait_s = min(every, _RENEW_RETRY_S)
                continue
            if not kept:
                self._lose(running, "re_claimed")
                break
            running.valid_until = asked + row.lease_s
            wait_s = every
        try:
            return await call
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise
            return None
        except Deferred as exc:
            log.warning("approval_deferred", approval_id=row.id, error=str(exc.__cause__))
            return None

    def _lose(self, running: _Running, reason: str) -> None:
        log.warning("approval_lease_lost", approval_id=running.row.id, reason=reason)
        running.ending = "lost"
        running.call.cancel()

    async def _renew(self, row: Claimed) -> bool:
        async with self._pool.connection() as conn:
            return await store.renew(conn, row, self.owner)

    async def _finish(self, running: _Running, outcome: Outcome) -> None:
        row = running.row
        loop = asyncio.get_running_loop()
        delay = 0.25
        while True:
            try:
                written = await within(DB_TIMEOUT_S, self._write(row, outcome))
                break
            except EXPECTED as exc:
                if loop.time() + delay >= running.valid_until:
                    log.error("approval_result_lost", approval_id=row.id, error=str(exc))
                    return
                await asyncio.sleep(delay)
                delay = doubled(delay, 2.0)
        if not written:
            log.warning("approval_finish_fenced", approval_id=row.id, attempt=row.attempt)
            return
        if outcome.status == "completed":
            log.info("approval_completed", approval_id=row.id, attempt=row.attempt)
        else:
            code = outcome.payload["error_code"]
            log.info("approval_failed", approval_id=row.id, attempt=row.attempt, error_code=code)

    async def _write(self, row: Claimed, outcome: Outcome) -> bool:
        payload = without_nul(outcome.payload)  # else a refused write, a second call
        return await self._finisher.finish(
            Finish(row, outcome.status, payload, truncated=outcome.truncated)
        )

    async def _release(self, row: Claimed) -> None:
        async def release() -> str | None:
            async with self._pool.connection() as conn:
                return await store.release(conn, row, self.owner, self._exhausted)

        try:
            status = await within(DB_TIMEOUT_S, release())
        except EXPECTED as exc:  # the lease will expire instead
            log.warning("approval_release_failed", approval_id=row.id, error=str(exc))
            return
        log.info("approval_released", approval_id=row.id, attempt=row.attempt, status=status)
