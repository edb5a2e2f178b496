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
from typing import Any

from mcp_gateway.approvals.outcomes import delivered
from mcp_gateway.approvals.waiters import ApprovalWaiters
from mcp_gateway.transport.asgi import wait_disconnect
from mcp_gateway.transport.exchange import Exchange
from mcp_gateway.transport.jsonrpc import Message, encode
from shared.engine.errors import Language

PROGRESS_S = 5.0

_WAITING: dict[Language, str] = {
    "en": "A human must approve this call before it runs (approval {id}); waiting for the decision.",
    "ru": "Этот вызов должен подтвердить человек (заявка {id}); ждём решения.",
}

Repeat = Callable[[], Awaitable[dict[str, Any]]]


class ApprovalWait:
    """How one tools/call waits: its stream, progress token and time; ``None`` from
    ``plan`` when it answers at once."""

    __slots__ = ("_exchange", "_language", "_token", "_wait_s", "_waiters")

    def __init__(
        self,
        exchange: Exchange,
        waiters: ApprovalWaiters,
        token: str | int,
        wait_s: float,
        language: Language,
    ) -> None:
        self._exchange = exchange
        self._waiters = waiters
        self._token = token
        self._wait_s = wait_s
        self._language = language

    @classmethod
    def plan(cls, exchange: Exchange, message: Message) -> ApprovalWait | None:
        meta = message.params.get("_meta")
        token = meta.get("progressToken") if isinstance(meta, dict) else None
        if not isinstance(token, str | int) or isinstance(token, bool) or not exchange.sse_ok:
            return None
        state = exchange.state
        wait_s = state.settings.approval_wait_s
        if exchange.agent.approval_wait_s is not None:  # an agent may only lower it
            wait_s = min(wait_s, exchange.agent.approval_wait_s)
        if wait_s <= 0 or state.waiters.closing:
            return None
        return cls(exchange, state.waiters, token, wait_s, state.settings.language)

    async def answer(self, first: dict[str, Any], repeat: Repeat) -> dict[str, Any]:
        """The call's answer: ``first`` (approval_required) or, once its approval
        finished within the wait, what ``repeat`` then gives."""
        approval_id = first["structuredContent"]["approval_id"]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._wait_s
        gone = asyncio.ensure_future(wait_disconnect(self._exchange.receive))
        try:
            with self._waiters.waiting(approval_id) as finished:
                step = 0
                while (left := deadline - loop.time()) > 0:
                    step += 1
                    if not await self._exchange.notify(self._progress(approval_id, step)):
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
                        if delivered(answer) is not None or _approval_of(answer) != approval_id:
                            return answer  # the outcome, or a new approval after a lost claim
                return first
        finally:
            gone.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gone

    def _progress(self, approval_id: str, step: int) -> bytes:
        return encode(
            {
                "jsonrpc": "2.0",
                "method": "notifications/progress",
                "params": {
                    "progressToken": self._token,
                    "progress": step,
                    "message": _WAITING[self._language].format(id=approval_id),
                },
            }
        )


def _approval_of(answer: dict[str, Any]) -> Any:
    structured = answer.get("structuredContent")
    return structured.get("approval_id") if isinstance(structured, dict) else None
