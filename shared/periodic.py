"""Background loops: one shell that repeats a body, outlives its failures and
stops cleanly (docs/architecture.md, "Background loops").

``PeriodicTask`` runs ``body()`` every ``interval_s``; ``wake()`` runs it at
once (a notification, a freed slot). A failed run never ends the loop:

- it is counted in ``crank_background_failures_total{task}`` (shared.metrics);
- an expected error (``expected``; by default the database or the network
  being away) is logged as a warning when a streak of failures begins, and
  the streak's end as ``background_task_recovered``: an outage writes two
  lines, not one per attempt. Any other exception is a bug and is logged
  with its traceback every time (``background_task_crashed``);
- the next run comes after ``retry_s``, doubling with each further failure
  up to ``retry_max_s``; the first success brings back ``interval_s``.

Only cancelling the task ends the loop. ``stop()`` cancels the run under way
unless it is given ``wait_s`` to finish it (a flusher must not be cut off
mid-write); ``final_run=True`` then runs the body once more so a flusher
writes what it still holds. A failed final run is counted and raised: the
owner knows what was lost and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import psycopg
import structlog

from shared.backoff import doubled
from shared.metrics import BACKGROUND_FAILURES

log = structlog.get_logger(__name__)

# The database or the network is away, or did not answer in time: the next run may succeed.
EXPECTED: tuple[type[Exception], ...] = (psycopg.Error, OSError, TimeoutError)
RETRY_MAX_FACTOR = 8.0  # the default back-off cap, in units of retry_s


class PeriodicTask:
    """Runs ``body`` every ``interval_s`` until stopped; see the module docstring."""

    def __init__(
        self,
        name: str,
        body: Callable[[], Awaitable[object]],
        *,
        interval_s: float,
        retry_s: float | None = None,
        retry_max_s: float | None = None,
        expected: tuple[type[Exception], ...] = EXPECTED,
    ) -> None:
        self.name = name
        self._body = body
        self._interval_s = interval_s
        self._retry_s = interval_s if retry_s is None else retry_s
        cap = self._retry_s * RETRY_MAX_FACTOR if retry_max_s is None else retry_max_s
        self._retry_max_s = max(cap, self._retry_s)
        self._next_retry_s = self._retry_s
        self._expected = expected
        self._failures = BACKGROUND_FAILURES.labels(name)  # shows as 0 before any failure
        self._failing = 0  # consecutive failed runs
        self._wake = asyncio.Event()
        self._stopping = False
        self._task: asyncio.Task[None] | None = None

    def start(self, *, first_delay_s: float | None = None) -> None:
        """Start the loop; the first run comes after ``first_delay_s`` (default: one interval)."""
        delay = self._interval_s if first_delay_s is None else first_delay_s
        self._task = asyncio.create_task(self._loop(delay), name=self.name)

    def wake(self) -> None:
        """Run the body now, or right after the run under way."""
        self._wake.set()

    def request_stop(self) -> None:
        """No run after the one under way; callable from synchronous code (a signal handler)."""
        self._stopping = True
        self._wake.set()

    async def stop(self, *, wait_s: float | None = 0.0, final_run: bool = False) -> None:
        """End the loop, then run the body once more if ``final_run``.

        The run under way gets ``wait_s`` to finish (None: as long as it
        takes) and is cancelled after that. A failed final run is counted and
        raised.
        """
        self.request_stop()
        task, self._task = self._task, None
        if task is not None:
            if wait_s is None or wait_s > 0:
                await asyncio.wait({task}, timeout=wait_s)
            task.cancel()
            await asyncio.wait({task})  # the loop raises nothing but its cancellation
        if final_run:
            try:
                await self._body()
            except Exception:
                self._failures.inc()
                raise

    async def _loop(self, delay_s: float) -> None:
        while not self._stopping:
            await self._sleep(delay_s)
            if self._stopping:
                return
            self._wake.clear()
            delay_s = await self._run()

    async def _sleep(self, delay_s: float) -> None:
        """Wait ``delay_s``, or less when woken."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay_s):
                await self._wake.wait()

    async def _run(self) -> float:
        """One run of the body; returns how long to wait before the next."""
        try:
            await self._body()
        except self._expected as exc:
            delay_s = self._failed()
            if self._failing == 1:
                error = str(exc) or type(exc).__name__
                log.warning("background_task_failed", task=self.name, error=error)
            return delay_s
        except Exception:  # the top of a background loop: a bug must not end it
            delay_s = self._failed()
            log.exception("background_task_crashed", task=self.name, failing=self._failing)
            return delay_s
        if self._failing:
            log.info("background_task_recovered", task=self.name, failures=self._failing)
        self._failing = 0
        self._next_retry_s = self._retry_s
        return self._interval_s

    def _failed(self) -> float:
        """Count a failed run; returns the back-off before the next."""
        self._failing += 1
        self._failures.inc()
        delay_s = self._next_retry_s
        self._next_retry_s = doubled(delay_s, self._retry_max_s)
        return delay_s
