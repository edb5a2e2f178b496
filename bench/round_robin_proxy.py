"""A small TCP load balancer on loopback for bench/scale_out.py: each accepted
connection goes to the next backend in turn and its bytes are relayed both ways.

    .venv/bin/python bench/round_robin_proxy.py --port 9000 127.0.0.1:8081 127.0.0.1:8082

Connection-level round robin, as a layer-4 balancer (or a Kubernetes Service)
does it: a client that keeps its connection talks to one backend, so wrk's
``-c`` connections spread evenly over the backends when ``-c`` is a multiple
of their number. Any replica answers any request (docs/architecture.md,
"Sessions": no sticky sessions are needed). Protocol callbacks, not streams,
with back-pressure both ways: the relay costs the least Python per chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import signal


class _Relay(asyncio.Protocol):
    """One side of a relayed connection: what it receives goes to ``peer``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Relay | None = None
        self._pending: list[bytes] = []  # received before the peer was connected

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        peer = self.peer
        if peer is None or peer.transport is None:
            self._pending.append(data)
        else:
            peer.transport.write(data)

    def connected(self, peer: _Relay) -> None:
        self.peer = peer
        assert peer.transport is not None
        for data in self._pending:
            peer.transport.write(data)
        self._pending.clear()

    # The peer's buffer is full: stop reading here until it drains.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def eof_received(self) -> bool:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write_eof()
        return True  # keep our side open until the peer closes too

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()


async def serve(port: int, backends: list[tuple[str, int]]) -> None:
    loop = asyncio.get_running_loop()
    turn = itertools.cycle(backends)
    connecting: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references

    def accepted() -> _Relay:
        client = _Relay()
        host, backend_port = next(turn)

        async def connect() -> None:
            try:
                _, backend = await loop.create_connection(_Relay, host, backend_port)
            except OSError:
                if client.transport is not None:
                    client.transport.close()
                return
            backend.connected(client)
            client.connected(backend)

        task = loop.create_task(connect())
        connecting.add(task)
        task.add_done_callback(connecting.discard)
        return client

    server = await loop.create_server(accepted, "127.0.0.1", port, backlog=1024)
    stopped = asyncio.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    async with server:
        print(f"proxy 127.0.0.1:{port} -> {len(backends)} backends", flush=True)
        await stopped.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("backends", nargs="+", help="HOST:PORT of each backend, in turn")
    args = parser.parse_args()
    backends = [(b.rpartition(":")[0], int(b.rpartition(":")[2])) for b in args.backends]
    asyncio.run(serve(args.port, backends))


if __name__ == "__main__":
    main()
