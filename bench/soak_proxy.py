"""The soak's load balancer: a round-robin TCP proxy on loopback in front of the gateways.

    python -m bench.soak_proxy --port P --backend 127.0.0.1:A --backend 127.0.0.1:B

Each accepted connection goes to the next backend in turn; a backend that refuses
the connect (a killed replica) is skipped for the next one, so a client sees an
error only when every backend refuses (the connection is then closed unanswered).
Bytes are copied both ways until either side closes. It works per connection,
below HTTP, so it costs little CPU and holds no session: the soak's clients open
a connection per request (``Connection: close``), which makes every request a
fresh round-robin pick, with no stickiness. A connection whose backend dies
mid-request is closed: the client sees a dropped connection, not an HTTP status.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import sys

CHUNK = 65536


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


class Balancer:
    def __init__(self, backends: list[tuple[str, int]]) -> None:
        self.backends = backends
        self._turn = itertools.cycle(range(len(backends)))

    async def connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        first = next(self._turn)
        for offset in range(len(self.backends)):
            host, port = self.backends[(first + offset) % len(self.backends)]
            try:
                return await asyncio.open_connection(host, port)
            except OSError:
                continue  # refused: this replica is down, try the next
        return None

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        backend = await self.connect()
        if backend is None:
            writer.close()
            return
        upstream_reader, upstream_writer = backend
        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))


async def serve(port: int, backends: list[tuple[str, int]]) -> None:
    balancer = Balancer(backends)
    server = await asyncio.start_server(balancer.handle, "127.0.0.1", port, backlog=1024)
    async with server:
        await server.serve_forever()


def backend(value: str) -> tuple[str, int]:
    host, _, port = value.rpartition(":")
    return host, int(port)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--backend", type=backend, action="append", required=True)
    args = parser.parse_args()
    try:
        asyncio.run(serve(args.port, args.backend))
    except KeyboardInterrupt:
        sys.exit(0)
