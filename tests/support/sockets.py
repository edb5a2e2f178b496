"""Connect checks for the outbound executor (``UpstreamExecutor(connect_check=...)``):
one that lets nothing be dialled, and one that lets only loopback be; and a resolver
stub, so no test asks the system resolver.

A connect check is asked with the address the guard allowed right before a client
pinned to that address is built: what it records is exactly what reqwest would dial.
"""

from __future__ import annotations

import socket


class NoSockets:
    """Records the address and refuses it: nothing is dialled."""

    def __init__(self) -> None:
        self.addresses: list[str] = []

    def __call__(self, ip: str, port: int) -> None:
        self.addresses.append(ip)
        raise ConnectionRefusedError("test: no sockets here")


class LoopbackOnly:
    """For tests that need a real answer: 127.0.0.1 only."""

    def __init__(self) -> None:
        self.addresses: list[str] = []

    def __call__(self, ip: str, port: int) -> None:
        self.addresses.append(ip)
        if ip != "127.0.0.1":
            raise ConnectionRefusedError("test: loopback only")


class StubResolver:
    """Answers from a table; ``numeric`` also answers what getaddrinfo makes of
    legacy numeric hosts (``0x7f000001``), computed locally by inet_aton."""

    def __init__(self, table: dict[str, list[str]] | None = None, *, numeric: bool = False) -> None:
        self.table = table or {}
        self.numeric = numeric
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        addresses = self.table.get(host)
        if addresses is None and self.numeric:
            addresses = [socket.inet_ntoa(socket.inet_aton(host))]  # OSError if not numeric
        if addresses is None:
            raise OSError(f"stub: unknown host {host}")
        return addresses
