"""Waiting on the open call for an approval's decision (docs/architecture.md,
"Waiting for a decision").

A tools/call whose client takes an SSE answer and sent ``params._meta.progressToken``
is not answered ``approval_required`` at once: the answer becomes an SSE stream
with a ``notifications/progress`` at once (a human must approve, and which
approval) and again every ``PROGRESS_S``, so client timeouts that reset on
progress do not fire. When the approval finishes (mcp_gateway.approvals.waiters),
the call does what a repeat of it would (``repeat``: the same gate, which claims
the outcome exactly once across replicas) and answers that: the outcome, or, if
a concurrent repeat won the claim, what a repeat then gets.

No decision within the wait (``CRANK_APPROVAL_WAIT_S``), or the process shutting
down: the seed's ``approval_required`` answer, unchanged. A client that goes away
ends only its wait: the approval stays as it is.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from mcp_gateway.approvals.waiters import ApprovalWaiters
from mcp_gateway.pipeline.channel import ClientChannel
from mcp_gateway.pipeline.outcomes import Delivered, PendingApproval
from shared.engine.errors import Language

PROGRESS_S = 5.0

_WAITING: dict[Language, str] = {
    "en": "A human must approve this call before it runs (approval {id}); waiting for the decision.",
    "ru": "Этот вызов должен подтвердить человек (заявка {id}); ждём решения.",
}

Repeat = Callable[[], Awaitable[PendingApproval | Delivered]]


class ApprovalWait:
    """How one tools/call waits: its channel, progress token and time."""

    __slots__ = ("_channel", "_language", "_token", "_wait_s", "_waiters")

    def __init__(
        self,
        channel: ClientChannel,
        waiters: ApprovalWaiters,
        token: str | int,
        wait_s: float,
        language: Language,
    ) -> None:
        self._channel = channel
        self._waiters = waiters
        self._token = token
        self._wait_s = wait_s
        self._language = language

    async def answer(self, first: PendingApproval, repeat: Repeat) -> PendingApproval | Delivered:
        """``first`` or, once its approval finished within the wait, what ``repeat`` gives."""
        approval_id = first.approval_id
        message = _WAITING[self._language].format(id=approval_id)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        gone = asyncio.ensure_future(self._channel.gone())
        try:
            with self._waiters.waiting(approval_id) as finished:
                step = 0
                while (left := deadline - loop.time()) > 0:
                    step += 1
                    if not await self._channel.progress(self._token, step, message):
                        return first  # the client left; the approval stays
                    ended = asyncio.ensure_future(finished.wait())
                    await asyncio.wait(
                        {ended, gone},
                        timeout=min(PROGRESS_S, left),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    ended.cancel()
                    if gone.done() or self._waiters.closing:
                        return first
                    if finished.is_set():
                        finished.clear()
                        answer = await repeat()
                        if answer != first:
                            return answer  # the outcome, or a new approval after a lost claim
                return first
        finally:
            gone.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gone
