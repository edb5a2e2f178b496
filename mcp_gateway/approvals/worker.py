"""The approval worker: runs approved calls, once, on any replica.

Every gateway process runs one ``ApprovalWorker`` (mcp_gateway.app). A row
moves along the edges of docs/architecture.md, "Approval state machine" (statements in mcp_gateway.approvals.store)::

    approved ──claim──▶ executing ──finish──▶ completed | failed
                          │   ▲
                          │   └─ lease expired: re-claimed, attempt + 1; or
                          │      failed once max_attempts claims are spent
                          └─ SIGTERM: released ──▶ approved

Waking. A claim round runs when the Postgres channel ``crank_approvals``
(``store.CHANNEL``) is notified — the approve endpoint, once a decision has
committed, wakes this worker and sends ``NOTIFY crank_approvals`` (any
payload), one for all the decisions made meanwhile (``approved``,
mcp_gateway.approvals.wakeups), and a release sends it too — and every
``poll_s`` (1 s) as the fallback that works alone (e.g.
``CRANK_MCP_LISTEN=false`` behind PgBouncer). The gateway LISTENs on the
process's LISTEN connection (mcp_gateway.upkeep.notifications), which calls ``wake`` for
this channel and also after it reconnects. A round claims at most as many
rows as there are free slots (``CRANK_APPROVAL_WORKERS`` per process).

Leases. At claim the lease is ``timeout_ms * (retries + 1) + margin`` of the
row's operation version; while the call runs it is renewed every third of
that. A renewal that updates no row means another process re-claimed the row:
the call is cancelled at once and nothing is written. A renewal the database
does not answer is retried every second; once less than a third of the lease
is left unrenewed the call is cancelled too (the row then waits for its lease
to expire and is re-claimed).

Performing. mcp_gateway.approvals.execution rebuilds the stored request (its
secrets were masked), checks it against the stored one and sends it; the
selected result or the error payload is recorded. An upstream error fails
the row at once: the executor already retried where repeating is safe.

Finishing is fenced on ``(id, attempt, status, lease_owner)``: a stale worker
writes nothing. Outcomes are written in batches (mcp_gateway.approvals.finishing:
what arrives while one statement is under way goes in the next, each row
fenced on its own), so a fast upstream costs one commit per batch, not per
call. A database error while finishing is retried while the lease is still
ours; after that the row is left to be re-claimed. So the payload is
made storable first: a NUL (U+0000) in the upstream's answer, which jsonb
refuses, becomes U+FFFD, or every attempt would call the upstream again.

Shutdown (SIGTERM). ``stop_claiming`` runs on the signal; ``stop`` lets
running calls finish for ``grace_s`` (``CRANK_APPROVAL_SHUTDOWN_GRACE_S``),
then cancels the rest and releases their rows (executing → approved, NOTIFY).
A release keeps the attempt: the request may already have reached the
upstream, so the attempt counts, and a row released on its last attempt fails
as exhausted. SIGKILL leaves the row ``executing``; another process re-claims
it when the lease expires.

Exactly once. Claims are atomic, so in normal operation each approved call
is sent once. A generic HTTP client cannot promise exactly one external side
effect when a process dies between the upstream's answer and the write of the
result: the re-claim sends the request again. Mutating operations should set
``execution_config.idempotency`` so the upstream sees the same key twice and
can drop the repeat.
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
        """A claim round now (a notification, or a reconnected listener)."""
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
