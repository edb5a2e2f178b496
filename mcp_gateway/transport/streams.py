"""Open server-to-client SSE streams, and the list_changed notifications they carry.

A stream registers under its agent; when a snapshot swap changes what that
agent's tools/list shows (its fingerprint), every stream of the agent gets
``notifications/tools/list_changed``. Closed streams unregister themselves.

On shutdown (``StreamHub.shut_down``, called on the first SIGTERM/SIGINT and
again in the lifespan shutdown) every stream ends at once: granian waits for
open answers before it stops, and an SSE stream never ends by itself. A
stream ends with the end of the HTTP body and no final message, so the client
sees its stream (legacy GET) or subscription (subscriptions/listen) lost and
opens a new one, which the load balancer sends to a replica that is still up.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import defaultdict
from collections.abc import Callable

from mcp_gateway.catalog.snapshot import Snapshot
from mcp_gateway.transport.asgi import (
    Receive,
    Send,
    end_stream,
    send_comment,
    send_event,
    start_stream,
    wait_disconnect,
)
from mcp_gateway.upkeep.metrics import OPEN_STREAMS

LIST_CHANGED = "notifications/tools/list_changed"
KEEPALIVE_S = 15.0
_QUEUE_LIMIT = 16


class StreamHub:
    """This process's open SSE streams by agent; a swap tells those whose tools/list changed."""

    def __init__(self) -> None:
        self._streams: dict[int, set[asyncio.Queue[str]]] = defaultdict(set)
        self._closing = asyncio.Event()

    def shut_down(self) -> None:
        """End every open stream now, and any opened later at once."""
        self._closing.set()

    async def closing(self) -> None:
        """Returns once ``shut_down`` has been called."""
        await self._closing.wait()

    def open(self, agent_id: int) -> asyncio.Queue[str]:
        queue: asyncio.Queue[str] = asyncio.Queue(maxsize=_QUEUE_LIMIT)
        self._streams[agent_id].add(queue)
        return queue

    def close(self, agent_id: int, queue: asyncio.Queue[str]) -> None:
        streams = self._streams.get(agent_id)
        if streams is not None:
            streams.discard(queue)
            if not streams:
                del self._streams[agent_id]

    def count(self) -> int:
        return sum(len(s) for s in self._streams.values())

    def snapshot_swapped(self, old: Snapshot, new: Snapshot) -> None:
        for agent_id, queues in list(self._streams.items()):
            before = old.agents_by_id.get(agent_id)
            after = new.agents_by_id.get(agent_id)
            old_print = before.fingerprint if before and before.published else None
            new_print = after.fingerprint if after and after.published else None
            if old_print == new_print:
                continue
            for queue in queues:
                if not queue.full():  # a client this far behind re-lists anyway
                    queue.put_nowait(LIST_CHANGED)


async def serve_stream(
    hub: StreamHub,
    agent_id: int,
    receive: Receive,
    send: Send,
    *,
    first: bytes | None,
    render: Callable[[str], bytes | None],
    ended: Callable[[], bool],
) -> None:
    """Hold one SSE answer open: ``first`` (if any), then each rendered event,
    keep-alive comments in between, until the client leaves, ``ended()`` or the
    hub shuts down."""
    queue = hub.open(agent_id)
    OPEN_STREAMS.inc()
    disconnected = asyncio.ensure_future(wait_disconnect(receive))
    closing = asyncio.ensure_future(hub.closing())
    try:
        await start_stream(send)
        if first is not None:
            await send_event(send, first)
        else:  # body bytes now, so the client sees the headers without waiting for an event
            await send_comment(send, b"stream open")
        while not disconnected.done() and not closing.done() and not ended():
            getter = asyncio.ensure_future(queue.get())
            done, _ = await asyncio.wait(
                {getter, disconnected, closing},
                timeout=KEEPALIVE_S,
                return_when=asyncio.FIRST_COMPLETED,
            )
            if getter in done:
                data = render(getter.result())
                if data is not None:
                    await send_event(send, data)
            else:
                getter.cancel()
                if not disconnected.done() and not closing.done():
                    await send_comment(send)
        if not disconnected.done():
            await end_stream(send)
    except OSError:
        pass  # the client went away mid-write
    finally:
        for waiter in (disconnected, closing):
            waiter.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await waiter
        hub.close(agent_id, queue)
        OPEN_STREAMS.dec()
