"""Socket factories for the outbound executor's connector: one that makes no
socket at all, and one that connects to loopback only."""

from __future__ import annotations

import socket


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
