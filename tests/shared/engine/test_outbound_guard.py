"""The SSRF guard at its decision point, inside the real connector.

No packet leaves this machine even when the guard is wrong: names are
answered by resolver stubs (never the system resolver), and the connect check
records every address a client would be pinned to and refuses it. "Blocked"
means the guard refused before any address reached the check; "allowed" means
the check was asked for exactly that address (and refused it). Only tests that need a real answer talk to a server on
127.0.0.1. The address categories themselves are tests/shared/test_ssrf.py.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from shared.engine.outbound import (
    ExecutorConfig,
    UpstreamBlocked,
    UpstreamExecutor,
    UpstreamRequest,
    UpstreamUnavailable,
)
from shared.engine.ssrf import AddressPolicy, parse_allowlist
from tests.support.sockets import LoopbackOnly, NoSockets, StubResolver

FAST = ExecutorConfig(backoff_base_s=0.01, backoff_cap_s=0.02)
PORT = 18443  # never listened on: nothing here connects to it


def executor(
    resolver: StubResolver,
    net: NoSockets | LoopbackOnly,
    *,
    allow_private: bool = False,
    allowlist: tuple[str, ...] = (),
) -> UpstreamExecutor:
    policy = AddressPolicy(allow_private=allow_private, allowlist=parse_allowlist(allowlist))
    return UpstreamExecutor(policy, FAST, resolver=resolver, connect_check=net)


def get(url: str, retries: int = 0) -> UpstreamRequest:
    return UpstreamRequest(method="GET", url=url, timeout_ms=2000, retries=retries)


NON_PUBLIC = [
    "::ffff:127.0.0.1",  # IPv4-mapped loopback
    "::ffff:10.0.0.5",
    "::ffff:192.168.1.1",
    "::127.0.0.1",  # IPv4-compatible
    "2002:7f00:1::1",  # 6to4 of 127.0.0.1
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "100.64.0.1",  # CGNAT
    "100.127.255.254",
    "::1",
    "0.0.0.0",  # noqa: S104 - an answer to judge; Linux would connect it to loopback
    "127.0.0.2",
    "10.0.0.5",
    "172.16.0.1",
    "192.168.1.1",
    "169.254.1.1",
    "fe80::1",
    "fd12:3456:789a::1",
    "198.18.0.1",
    "240.0.0.1",
]

METADATA = [
    "169.254.169.254",
    "::ffff:169.254.169.254",
    "::a9fe:a9fe",  # IPv4-compatible
    "2002:a9fe:a9fe::1",  # 6to4
    "64:ff9b::a9fe:a9fe",  # NAT64
    "fd00:ec2::254",
    "169.254.170.2",
    "100.100.100.200",
    "168.63.129.16",
    "::ffff:100.100.100.200",
]


@pytest.mark.parametrize("address", NON_PUBLIC)
async def test_a_name_resolving_to_a_non_public_address_is_refused_before_any_socket(
    address: str,
) -> None:
    resolver, net = StubResolver({"rebind.test": [address]}), NoSockets()
    async with executor(resolver, net, allowlist=("127.0.0.1:1", "other.test:18443")) as ex:
        with pytest.raises(UpstreamBlocked):
            await ex.execute(get(f"http://rebind.test:{PORT}/"))
    assert (resolver.asked, net.addresses) == (["rebind.test"], [])


@pytest.mark.parametrize("address", METADATA)
async def test_metadata_answers_stay_refused_with_the_flag_and_an_allowlist_entry(
    address: str,
) -> None:
    resolver, net = StubResolver({"metadata.test": [address]}), NoSockets()
    allowlist = (f"metadata.test:{PORT}", f"[{address}]:{PORT}" if ":" in address else address)
    async with executor(resolver, net, allow_private=True, allowlist=allowlist) as ex:
        with pytest.raises(UpstreamBlocked):
            await ex.execute(get(f"http://metadata.test:{PORT}/latest/meta-data/"))
    assert net.addresses == []


@pytest.mark.parametrize(
    "url",
    [
        f"http://[::ffff:127.0.0.1]:{PORT}/",
        f"http://[::ffff:7f00:1]:{PORT}/",
        f"http://[::ffff:10.0.0.5]:{PORT}/",
        f"http://[64:ff9b::7f00:1]:{PORT}/",
        f"http://[2002:7f00:1::1]:{PORT}/",
        f"http://[::1]:{PORT}/",
        f"http://100.64.0.1:{PORT}/",
        f"http://0.0.0.0:{PORT}/",
        f"http://127.0.0.2:{PORT}/",
        f"http://[fe80::1%25lo]:{PORT}/",
        f"http://[fd12:3456:789a::1]:{PORT}/",
    ],
)
async def test_a_non_public_ip_literal_is_refused_without_asking_the_resolver(url: str) -> None:
    resolver, net = StubResolver(), NoSockets()
    async with executor(resolver, net, allowlist=("127.0.0.1:1",)) as ex:
        with pytest.raises(UpstreamBlocked):
            await ex.execute(get(url))
    assert (resolver.asked, net.addresses) == ([], [])


@pytest.mark.parametrize(
    "url",
    [
        "http://[::ffff:169.254.169.254]/",
        "http://[::ffff:a9fe:a9fe]/",
        "http://[fd00:ec2::254]/",
        "http://[64:ff9b::a9fe:a9fe]/",
        "http://100.100.100.200/",
        "http://169.254.170.2/v2/credentials",
    ],
)
async def test_a_metadata_ip_literal_is_refused_with_private_upstreams_allowed(url: str) -> None:
    net = NoSockets()
    async with executor(StubResolver(), net, allow_private=True) as ex:
        with pytest.raises(UpstreamBlocked):
            await ex.execute(get(url))
    assert net.addresses == []


@pytest.mark.parametrize("host", ["2130706433", "127.1", "017700000001", "0177.0.0.1", "127.0.1"])
async def test_a_legacy_numeric_ipv4_host_is_blocked_even_with_private_allowed(host: str) -> None:
    # socket libraries and reqwest's URL parser read these as 127.0.0.1: refused
    # as an address trick, whatever that address's verdict would be.
    resolver, net = StubResolver(), NoSockets()
    async with executor(resolver, net, allow_private=True) as ex:
        with pytest.raises(UpstreamBlocked):
            await ex.execute(get(f"http://{host}:{PORT}/"))
    assert (resolver.asked, net.addresses) == ([], [])


@pytest.mark.parametrize("host", ["0x7f000001", "0x7f.1", "0x7f.0.0.1"])
async def test_a_hex_host_is_judged_by_the_address_it_stands_for(host: str) -> None:
    # reqwest's URL parser (WHATWG) reads these as 127.0.0.1 and would dial that
    # literal, never a resolver's answer: the guard judges that same literal.
    resolver, net = StubResolver(numeric=True), NoSockets()
    async with executor(resolver, net, allowlist=("127.0.0.1:1",)) as ex:
        with pytest.raises(UpstreamBlocked, match=r"127\.0\.0\.1:18443 resolves only to refused"):
            await ex.execute(get(f"http://{host}:{PORT}/"))
    assert (resolver.asked, net.addresses) == ([], [])


async def test_public_answers_pass_the_guard_and_reach_the_connect_check() -> None:
    resolver = StubResolver({"public.test": ["93.184.216.34", "2606:4700:4700::1111"]})
    net = NoSockets()
    async with executor(resolver, net) as ex:
        with pytest.raises(UpstreamUnavailable):
            await ex.execute(get("http://public.test/"))
        with pytest.raises(UpstreamUnavailable):
            await ex.execute(get("http://[2a00:1450:4001::200e]/"))
    assert sorted(net.addresses) == sorted(
        ["93.184.216.34", "2606:4700:4700::1111", "2a00:1450:4001::200e"]
    )


async def test_only_the_public_answers_of_a_mixed_name_reach_the_connect_check() -> None:
    resolver = StubResolver({"mixed.test": ["169.254.169.254", "10.0.0.5", "93.184.216.34"]})
    net = NoSockets()
    async with executor(resolver, net) as ex:
        with pytest.raises(UpstreamUnavailable):
            await ex.execute(get("http://mixed.test/"))
    assert net.addresses == ["93.184.216.34"]


async def test_a_host_name_allowlist_entry_allows_only_that_name_and_port() -> None:
    resolver = StubResolver({"api.internal": ["10.0.0.5"], "other.internal": ["10.0.0.5"]})
    net = NoSockets()
    async with executor(resolver, net, allowlist=(f"api.internal:{PORT}",)) as ex:
        with pytest.raises(UpstreamUnavailable):  # allowed; the stub makes no socket
            await ex.execute(get(f"http://api.internal:{PORT}/"))
        assert net.addresses == ["10.0.0.5"]
        for url in (f"http://other.internal:{PORT}/", "http://api.internal:8444/"):
            with pytest.raises(UpstreamBlocked):
                await ex.execute(get(url))
    assert net.addresses == ["10.0.0.5"]


async def test_an_offline_resolver_is_upstream_unavailable_and_dials_nothing() -> None:
    resolver, net = StubResolver(), NoSockets()  # every name unknown, as without a network
    async with executor(resolver, net) as ex:
        with pytest.raises(UpstreamUnavailable) as caught:
            await ex.execute(get("http://api.example.test/v1/latest", retries=2))
    assert caught.value.attempts == 3
    assert (resolver.asked, net.addresses) == (["api.example.test"] * 3, [])


# A real answer is needed from here on: servers on 127.0.0.1 only.


@pytest.fixture
async def server() -> AsyncIterator[TestServer]:
    hits: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        hits.append(request.path)
        key = request.path.strip("/")
        if key == "numeric-redirect":
            raise web.HTTPFound(f"http://2130706433:{request.url.port}/final")
        if key.startswith("flaky-"):  # 500 (or another status) on the first hit only
            status = int(key.split("-")[1])
            if hits.count(request.path) == 1:
                return web.Response(status=status, text="failing")
        return web.Response(text=f"{request.method} {len(hits)}")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    test_server = TestServer(app, host="127.0.0.1")
    await test_server.start_server()
    try:
        yield test_server
    finally:
        await test_server.close()


async def test_a_redirect_to_a_legacy_numeric_host_is_blocked(server: TestServer) -> None:
    net = LoopbackOnly()
    async with executor(StubResolver(), net, allow_private=True) as ex:
        with pytest.raises(UpstreamBlocked):
            await ex.execute(get(str(server.make_url("/numeric-redirect"))))
    assert net.addresses == ["127.0.0.1"]  # the first hop only


async def test_a_500_on_a_get_is_retried(server: TestServer) -> None:
    async with executor(StubResolver(), LoopbackOnly(), allow_private=True) as ex:
        response = await ex.execute(get(str(server.make_url("/flaky-500")), retries=1))
    assert (response.status, response.attempts) == (200, 2)


async def test_a_501_is_not_retried(server: TestServer) -> None:
    async with executor(StubResolver(), LoopbackOnly(), allow_private=True) as ex:
        response = await ex.execute(get(str(server.make_url("/flaky-501")), retries=2))
    assert (response.status, response.attempts) == (501, 1)


async def test_a_500_on_a_post_without_idempotency_key_is_not_retried(server: TestServer) -> None:
    async with executor(StubResolver(), LoopbackOnly(), allow_private=True) as ex:
        response = await ex.execute(
            UpstreamRequest(method="POST", url=str(server.make_url("/flaky-500")), retries=2)
        )
    assert (response.status, response.attempts) == (500, 1)
