"""The webhook delivery worker: sends the outbox's rows, at least once, on any replica.

One ``WebhookDeliverer`` per gateway process claims due rows (mcp_gateway.webhooks.outbox),
renders and keeps each body at its first attempt (mcp_gateway.webhooks.payloads), signs
and POSTs it through the process's executor, and records the outcome or the next try
(docs/architecture.md, "Webhooks").
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from psycopg_pool import AsyncConnectionPool
from yarl import URL

from mcp_gateway.catalog.snapshot import Snapshot
from mcp_gateway.catalog.workspace_state import WorkspaceState
from mcp_gateway.upkeep.metrics import WEBHOOK_ATTEMPTS
from mcp_gateway.webhooks import outbox
from mcp_gateway.webhooks.outbox import ClaimedDelivery
from mcp_gateway.webhooks.payloads import approval_links, render
from shared.backoff import equal_jitter
from shared.crypto import CryptoError, Sealed, SecretBox
from shared.db import DB_TIMEOUT_S, Connection, within
from shared.engine.masking import workspace_masker
from shared.engine.outbound import (
    OutboundError,
    UpstreamBlocked,
    UpstreamExecutor,
    UpstreamRequest,
)
from shared.periodic import EXPECTED, PeriodicTask
from shared.webhook_signing import signed_headers, subscription_associated_data

log = structlog.get_logger(__name__)

CONCURRENCY = 16  # deliveries one process sends at once
POLL_S = 1.0
TIMEOUT_MS = 10_000  # one attempt
LEASE_S = TIMEOUT_MS / 1000 + 20.0  # the attempt, its database writes, and a margin
RETRY_CAP_S = 3600.0
MAX_ANSWER_BYTES = 64 * 1024  # a receiver's answer is read (and dropped) up to this
_STOP_GRACE_S = 5.0


@dataclass(frozen=True, slots=True)
class DeliveryOptions:
    """What the settings decide: links, backoff and how long to keep trying."""

    public_url: str = ""  # CRANK_PUBLIC_URL
    path_prefix: str = ""  # CRANK_PUBLIC_PATH_PREFIX
    retry_base_s: float = 5.0  # CRANK_WEBHOOK_RETRY_BASE_MS
    max_age_s: float = 86400.0  # CRANK_WEBHOOK_MAX_AGE_S


class WebhookDeliverer:
    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        executor: UpstreamExecutor,
        *,
        owner: str,
        snapshot: Callable[[], Snapshot],
        box: SecretBox,
        options: DeliveryOptions,
        concurrency: int = CONCURRENCY,
        poll_s: float = POLL_S,
        rng: random.Random | None = None,
    ) -> None:
        self.owner = owner
        self._pool = pool
        self._executor = executor
        self._box = box
        self._workspace = WorkspaceState(pool, snapshot, box)
        self._options = options
        self._concurrency = concurrency
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not crypto
        self._rounds = PeriodicTask("webhook_deliveries", self._round, interval_s=poll_s)
        self._tasks: set[asyncio.Task[None]] = set()
        self._more = False

    def start(self) -> None:
        self._rounds.start(first_delay_s=0)

    def wake(self) -> None:
        self._rounds.wake()

    async def stop(self) -> None:
        """No new claims; deliveries under way get a few seconds, then are cancelled
        (their rows are sent again once the lease runs out)."""
        await self._rounds.stop(wait_s=DB_TIMEOUT_S)
        if self._tasks:
            _, pending = await asyncio.wait(set(self._tasks), timeout=_STOP_GRACE_S)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)

    async def _round(self) -> int:
        free = self._concurrency - len(self._tasks)
        if free <= 0:
            self._more = True
            return 0
        rows = await within(DB_TIMEOUT_S, self._claim(free))
        self._more = len(rows) == free
        for row in rows:
            task = asyncio.create_task(self._deliver(row), name=f"webhook-{row.id}")
            self._tasks.add(task)
            task.add_done_callback(self._done)
        return len(rows)

    async def _claim(self, limit: int) -> list[ClaimedDelivery]:
        async with self._pool.connection() as conn:
            return await outbox.claim(conn, owner=self.owner, limit=limit, lease_s=LEASE_S)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if self._more:
            self._rounds.wake()

    # -- one delivery ------------------------------------------------------

    async def _deliver(self, row: ClaimedDelivery) -> None:
        host = URL(row.url).host
        try:
            secret = self._open_secret(row)
            body = row.body if row.body is not None else await self._render(row)
            if body is None:
                return  # re-claimed meanwhile
            headers = signed_headers(secret, row.webhook_id, int(time.time()), body)
            request = UpstreamRequest(
                method="POST",
                url=str(URL(row.url)),
                headers=(("Content-Type", "application/json"), *headers.items()),
                body=body,
                timeout_ms=TIMEOUT_MS,
                retries=0,
                max_response_bytes=MAX_ANSWER_BYTES,
                egress=await self._workspace.egress(row.agent_id, row.workspace_id),
            )
            try:
                response = await self._executor.execute(request)
            except UpstreamBlocked as exc:
                await self._failed(row, str(exc), None, final=True)
                return
            except OutboundError as exc:
                await self._failed(row, str(exc), None, final=False)
                return
            if 200 <= response.status < 300:
                status = response.status
                await self._write(lambda conn: outbox.delivered(conn, row, self.owner, status))
                WEBHOOK_ATTEMPTS.labels("delivered").inc()
                log.info("webhook_delivered", webhook_id=row.webhook_id, attempt=row.attempts)
            else:
                error = f"the receiver answered HTTP {response.status}"
                await self._failed(row, error, response.status, final=False)
        except CryptoError:
            await self._failed(row, "the signing secret cannot be opened", None, final=True)
        except EXPECTED as exc:  # the database: the lease will run out, the row comes back
            log.warning("webhook_delivery_deferred", webhook_id=row.webhook_id, error=str(exc))
        except Exception:  # the top of one delivery: the lease will run out
            log.exception("webhook_delivery_crashed", webhook_id=row.webhook_id, host=host)

    def _open_secret(self, row: ClaimedDelivery) -> str:
        ciphertext, nonce, key_id = row.sealed
        return self._box.open(
            Sealed(ciphertext, nonce, key_id), subscription_associated_data(row.subscription_id)
        )

    async def _render(self, row: ClaimedDelivery) -> bytes | None:
        """The body of this delivery, stored for later attempts; None when the row is
        no longer this claim's."""
        secrets = await self._workspace.secrets(row.agent_id, row.workspace_id)
        links = approval_links(self._options.public_url, self._options.path_prefix, row.payload)
        body = render(row.format, row.event, row.payload, workspace_masker(secrets), links)
        kept = await self._write(lambda conn: outbox.keep_body(conn, row, self.owner, body))
        return body if kept else None

    def retry_after(self, attempts: int) -> float:
        """Exponential backoff with equal jitter: half fixed, half random."""
        base_s = self._options.retry_base_s
        return equal_jitter(attempts, base_s=base_s, cap_s=RETRY_CAP_S, rng=self._rng)

    async def _failed(
        self, row: ClaimedDelivery, error: str, http_status: int | None, *, final: bool
    ) -> None:
        retry_s = None if final else self.retry_after(row.attempts)
        if retry_s is not None and row.created_at_age_s + retry_s > self._options.max_age_s:
            retry_s = None
        await self._write(
            lambda conn: outbox.attempt_failed(
                conn, row, self.owner, error=error, http_status=http_status, retry_s=retry_s
            )
        )
        WEBHOOK_ATTEMPTS.labels("failed" if retry_s is None else "retry").inc()
        log.info(
            "webhook_attempt_failed",
            webhook_id=row.webhook_id,
            attempt=row.attempts,
            error=error,
            retry_s=None if retry_s is None else round(retry_s, 3),
        )

    async def _write(self, statement: Callable[[Connection], Awaitable[bool]]) -> bool:
        """One fenced statement on a pooled connection, bounded in time."""

        async def run() -> bool:
            async with self._pool.connection() as conn:
                return await statement(conn)

        return await within(DB_TIMEOUT_S, run())
