"""Socket factories for the outbound executor's connector: one that makes no
socket at all, and one that connects to loopback only; and a resolver stub, so
no test asks the system resolver."""

from __future__ import annotations

import socket

from aiohttp.abc import AbstractResolver, ResolveResult


class NoSockets:
    """A socket factory that records the address and makes no socket."""

    def __init__(self) -> None:
        self.addresses: list[str] = []

    def __call__(self, addr_info: tuple[object, ...]) -> socket.socket:
        sockaddr = addr_info[4]
        self.addresses.append(str(sockaddr[0]))  # type: ignore[index]
        raise ConnectionRefusedError("test: no sockets here")


class LoopbackOnly:
    """A socket factory for tests that need a real answer: loopback only."""

    def __init__(self) -> None:
        self.addresses: list[str] = []

    def __call__(self, addr_info: tuple[object, ...]) -> socket.socket:
        family, type_, proto, _, sockaddr = addr_info
        self.addresses.append(str(sockaddr[0]))  # type: ignore[index]
        if str(sockaddr[0]) != "127.0.0.1":  # type: ignore[index]
            raise ConnectionRefusedError("test: loopback only")
        return socket.socket(family, type_, proto)  # type: ignore[arg-type]


class StubResolver(AbstractResolver):
    """Answers from a table; ``numeric`` also answers what getaddrinfo makes of
    legacy numeric hosts (``0x7f000001``), computed locally by inet_aton."""

    def __init__(self, table: dict[str, list[str]] | None = None, *, numeric: bool = False) -> None:
        self.table = table or {}
        self.numeric = numeric
        self.asked: list[str] = []

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        self.asked.append(host)
        addresses = self.table.get(host)
        if addresses is None and self.numeric:
            addresses = [socket.inet_ntoa(socket.inet_aton(host))]  # OSError if not numeric
        if addresses is None:
            raise OSError(f"stub: unknown host {host}")
        return [
            ResolveResult(
                hostname=host,
                host=ip,
                port=port,
                family=socket.AF_INET6 if ":" in ip else socket.AF_INET,
                proto=0,
                flags=socket.AI_NUMERICHOST,
            )
            for ip in addresses
        ]

    async def close(self) -> None:
        pass
