"""Where an upstream request may connect, and pyreqwest clients that connect only there
(docs/architecture.md, "Outbound calls").

Crank resolves every URL host itself (``Resolver``; answers cached ``DNS_TTL_S``),
judges every address with the operator's ``AddressPolicy`` narrowed by the calling
workspace's ``EgressPolicy``, and sends the request through a client pinned to one
allowed address: ``ClientBuilder.resolve(host, ip, port)``, so reqwest never asks
DNS on its own, and the client's pool only ever holds connections to that address.
IP-literal URLs are judged as they are, no resolver asked. ``ClientCache`` keeps
the pinned clients (LRU; an evicted client is closed once no request uses it);
``HostSlots`` caps requests in flight per host and in total.
"""

from __future__ import annotations

import asyncio
import atexit
import functools
import gc
import socket
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol

from pyreqwest.client import Client, ClientBuilder

from shared.engine.egress import Blocked, EgressPolicy
from shared.engine.ssrf import AddressPolicy, Decision

__all__ = [
    "AddressRefused",
    "CachingResolver",
    "ClientCache",
    "ConnectCheck",
    "HostSlots",
    "Resolver",
    "SystemResolver",
    "allowed_addresses",
]

DNS_TTL_S = 10.0  # as aiohttp's ttl_dns_cache: a short cache, judged again on every use
_DNS_ENTRIES = 1024
IDLE_S = 15.0  # an idle pooled connection is closed after this (aiohttp's keep-alive default)

# Called with (ip, port) before a client pinned to that address is built; an
# OSError it raises counts as a refused connect. Tests use it so that nothing
# but loopback is ever dialled.
ConnectCheck = Callable[[str, int], None]


def _settle_before_exit() -> None:
    """pyreqwest 0.15's runtime thread may still want the GIL for objects freed by the
    interpreter's final collection, and CPython aborts the process ("PyGILState_Release:
    thread state must be current") if it asks during finalization. Freeing them here,
    while the interpreter still runs, and letting that thread finish keeps exits clean."""
    gc.collect()
    time.sleep(0.05)


_exit_hook: list[bool] = []


def _register_exit_hook() -> None:
    if not _exit_hook:
        atexit.register(_settle_before_exit)
        _exit_hook.append(True)


class AddressRefused(Exception):
    """No address of the host may be connected to (the message says why; ``blocked``
    which layer refused, for an admin)."""

    def __init__(self, message: str, blocked: Blocked) -> None:
        super().__init__(message)
        self.blocked = blocked


class Resolver(Protocol):
    """Host name and port to IP addresses (strings); raises ``OSError`` when it cannot."""

    async def resolve(self, host: str, port: int) -> list[str]: ...


class SystemResolver:
    """The system's resolver: getaddrinfo, in the loop's thread pool."""

    async def resolve(self, host: str, port: int) -> list[str]:
        infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
        return list(dict.fromkeys(str(info[4][0]) for info in infos))


class CachingResolver:
    """A ``Resolver`` behind a short cache of its answers (never of its failures); the
    answers are judged again on every use, so the cache decides nothing."""

    def __init__(self, inner: Resolver, ttl_s: float = DNS_TTL_S) -> None:
        self._inner = inner
        self._ttl_s = ttl_s
        self._cache: OrderedDict[tuple[str, int], tuple[float, list[str]]] = OrderedDict()

    async def resolve(self, host: str, port: int) -> list[str]:
        key = (host, port)
        cached = self._cache.get(key)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        addresses = await self._inner.resolve(host, port)
        self._cache[key] = (now + self._ttl_s, addresses)
        self._cache.move_to_end(key)
        if len(self._cache) > _DNS_ENTRIES:
            self._cache.popitem(last=False)
        return addresses


def allowed_addresses(
    policy: AddressPolicy,
    egress: EgressPolicy | None,
    addresses: list[str],
    *,
    host: str,
    port: int,
) -> list[str]:
    """The addresses ``host`` may be reached at; ``AddressRefused`` if none."""
    decisions = [(ip, _decide(policy, egress, ip, host, port)) for ip in addresses]
    allowed = [ip for ip, decision in decisions if decision.allowed]
    if not allowed:
        refused = [decision for _, decision in decisions]
        if egress is not None and any(decision.by_workspace for decision in refused):
            by_workspace = next(decision for decision in refused if decision.by_workspace)
            raise AddressRefused(egress.refusal(host), Blocked.of(by_workspace, host, port))
        # The operator's refusal an admin can change (an allowlist entry) before metadata.
        fixable = next((d for d in refused if d.reason != "metadata"), refused[0])
        raise AddressRefused(
            f"{host}:{port} resolves only to refused addresses", Blocked.of(fixable, host, port)
        )
    return allowed


# A pure function of frozen (hashable) values, asked on every hop: remembered
# rather than walking the address tables each time.
@functools.lru_cache(maxsize=4096)
def _decide(
    policy: AddressPolicy, egress: EgressPolicy | None, ip: str, host: str, port: int
) -> Decision:
    if egress is None:
        return policy.decide(ip, host=host, port=port)
    return egress.decide(policy, ip, host=host, port=port)


class _Pinned:
    __slots__ = ("client", "users")

    def __init__(self, client: Client) -> None:
        self.client = client
        self.users = 0


class ClientCache:
    """One pyreqwest client per (scheme, host, port, address), at most ``size`` idle ones kept."""

    def __init__(
        self,
        *,
        size: int,
        per_host: int,
        user_agent: str,
        connect_check: ConnectCheck | None = None,
    ) -> None:
        self._size = size
        self._per_host = per_host
        self._user_agent = user_agent
        self._check = connect_check
        self._clients: OrderedDict[tuple[str, str, int, str], _Pinned] = OrderedDict()
        self._closing: set[asyncio.Future[None]] = set()

    def _build(self, domain: str | None, port: int, ip: str) -> Client:
        if self._check is not None:
            self._check(ip, port)  # before any client exists that could dial it
        _register_exit_hook()
        builder = (
            ClientBuilder()
            # No proxy at all, from the environment or configured: through a proxy the
            # guard would judge the proxy's address, never the target's.
            .no_proxy()
            .follow_redirects(False)  # each hop is judged by Crank (outbound._redirect)
            .referer(False)
            # One client serves every agent and workspace: no cookie store, ever.
            .default_cookie_store(False)
            .user_agent(self._user_agent)
            .pool_max_idle_per_host(self._per_host)
            .pool_idle_timeout(timedelta(seconds=IDLE_S))
        )
        if domain is not None:
            builder = builder.resolve(domain, ip, port)  # reqwest never resolves itself
        return builder.build()

    def acquire(self, scheme: str, domain: str | None, ip: str, port: int) -> _Pinned:
        """The client pinned to ``ip`` for URLs of ``scheme://domain:port`` (``domain``
        ``None``: an IP-literal URL of ``ip`` itself); hand it back with ``release``."""
        key = (scheme, domain or ip, port, ip)
        pinned = self._clients.get(key)
        if pinned is None:
            pinned = self._clients[key] = _Pinned(self._build(domain, port, ip))
            self._evict()
        else:
            self._clients.move_to_end(key)
        pinned.users += 1
        return pinned

    def release(self, pinned: _Pinned) -> None:
        pinned.users -= 1
        if len(self._clients) > self._size:
            self._evict()

    def _evict(self) -> None:
        while len(self._clients) > self._size:
            key = next((k for k, p in self._clients.items() if p.users == 0), None)
            if key is None:
                return  # all in use: the cache shrinks once they are released
            closing = asyncio.ensure_future(self._clients.pop(key).client.close())
            self._closing.add(closing)
            closing.add_done_callback(self._closing.discard)

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), OrderedDict()
        for pinned in clients:
            await pinned.client.close()
        if self._closing:
            await asyncio.gather(*self._closing)


class _Slot:
    __slots__ = ("semaphore", "users")

    def __init__(self, limit: int) -> None:
        self.semaphore = asyncio.Semaphore(limit)
        self.users = 0


class HostSlots:
    """At most ``per_host`` requests in flight to one (scheme, host, port), ``total`` in all:
    one slow upstream cannot take every connection."""

    def __init__(self, *, total: int, per_host: int) -> None:
        self.total = asyncio.Semaphore(total)
        self._per_host = per_host
        self._hosts: dict[tuple[str, str, int], _Slot] = {}

    def enter(self, key: tuple[str, str, int]) -> asyncio.Semaphore:
        """The host's semaphore (then acquire it, and ``total``); ``leave`` when done."""
        slot = self._hosts.get(key)
        if slot is None:
            slot = self._hosts[key] = _Slot(self._per_host)
        slot.users += 1
        return slot.semaphore

    def leave(self, key: tuple[str, str, int]) -> None:
        slot = self._hosts[key]
        slot.users -= 1
        if slot.users == 0:
            del self._hosts[key]
