"""Request bodies being read now: each within a deadline, a few at a time per key.

A key's holder could otherwise open many connections, send the headers and
then trickle the body or never send it, holding a connection and a task each
for as long as the server's own timeouts allow (docs/architecture.md,
"Unfinished bodies"). Every body read of an authenticated request goes through
``BodyReads.read``:

- more than ``CRANK_MCP_UNFINISHED_BODIES_PER_KEY`` unfinished bodies of one key
  in this process: 429 with ``Retry-After`` before anything is read;
- a body not whole within ``CRANK_MCP_BODY_TIMEOUT_S`` of the start of its read:
  408.

The hot path arms no timer and reads no clock per request: a read registers its
task and the current sweep count in a dict, and one background sweep (``sweep``,
at least four times per timeout, at most every second) cancels the reads that
have outlived the timeout; the read turns that cancellation, and only that one,
into the 408. A key has an entry in the per-key count only while one of its
bodies is unfinished.
"""

from __future__ import annotations

import asyncio
from asyncio import current_task

from mcp_gateway.transport.asgi import Receive, read_body
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.upkeep.metrics import BODY_REFUSALS
from mcp_gateway.vocabulary.jsonrpc import INVALID_REQUEST, RATE_LIMITED_CODE
from shared.periodic import PeriodicTask

RETRY_AFTER_S = 1  # a healthy body takes milliseconds: a slot frees quickly
_TIMED_OUT = BODY_REFUSALS.labels("timeout")
_TOO_MANY = BODY_REFUSALS.labels("too_many_unfinished")


class BodyReads:
    """The unfinished request bodies of this process, by key; see the module docstring."""

    def __init__(self, timeout_s: int, per_key: int) -> None:
        self.timeout_s = timeout_s
        self.per_key = per_key
        # Time is counted in sweeps (no clock read per request): a read started during
        # sweep interval ``t`` is overdue from tick ``t + _ticks + 1`` on, i.e. after
        # at least timeout_s and at most one interval more.
        self._ticks = max(4, timeout_s)
        self._tick = 0
        self._by_key: dict[int, int] = {}  # unfinished bodies of a key; absent at zero
        self._started: dict[asyncio.Task[object], int] = {}  # each read's tick
        self._overdue: set[asyncio.Task[object]] = set()  # cancelled by ``sweep``
        self._sweeper = PeriodicTask(
            "body_read_deadlines", self.sweep, interval_s=timeout_s / self._ticks
        )

    def start(self) -> None:
        self._sweeper.start()

    async def stop(self) -> None:
        await self._sweeper.stop()

    def __len__(self) -> int:
        """Bodies being read now (the ``crank_mcp_unfinished_bodies`` gauge)."""
        return len(self._started)

    async def read(self, key_id: int, receive: Receive, limit: int) -> bytes:
        """The whole body of a request authenticated with key ``key_id`` (asgi.read_body);
        raises the 429 or 408 ProtocolError of the module docstring."""
        by_key = self._by_key
        held = by_key.get(key_id, 0)
        if held >= self.per_key:
            _TOO_MANY.inc()
            raise ProtocolError(
                429,
                f"this key already has {held} request bodies still arriving; send each "
                "body whole and at once",
                code=RATE_LIMITED_CODE,
                data={"retry_after_s": RETRY_AFTER_S},
                headers={"Retry-After": str(RETRY_AFTER_S)},
            )
        task = current_task()
        assert task is not None  # an ASGI handler always runs in a task
        by_key[key_id] = held + 1
        self._started[task] = self._tick
        try:
            return await read_body(receive, limit)
        except asyncio.CancelledError:
            if task not in self._overdue:
                raise  # the client went away, or the server is stopping
            task.uncancel()
            _TIMED_OUT.inc()
            raise ProtocolError(
                408,
                f"the request body did not arrive within {self.timeout_s} s; "
                "send it whole and at once",
                code=INVALID_REQUEST,
            ) from None
        finally:
            if self._overdue:
                self._overdue.discard(task)
            del self._started[task]
            left = by_key[key_id] - 1
            if left:
                by_key[key_id] = left
            else:
                del by_key[key_id]

    async def sweep(self) -> None:
        """Cancels every read past its deadline (the background loop's body)."""
        self._tick += 1
        cutoff = self._tick - self._ticks - 1
        for task, started in self._started.items():
            if started <= cutoff and task not in self._overdue:
                self._overdue.add(task)
                task.cancel()
