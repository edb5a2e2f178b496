"""A workspace's egress policy at the guard's decision (shared.engine.egress,
shared.engine.pinning, applied by shared.engine.outbound).

No packet leaves this machine: names are answered by a resolver stub, the connect
check refuses every address (``NoSockets``) or all but 127.0.0.1 (``LoopbackOnly``),
and the servers that must answer listen on 127.0.0.1.
"""

from __future__ import annotations

import ipaddress
from collections.abc import AsyncIterator

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from shared.engine.egress import EgressPolicy, parse_grant, parse_host_pattern
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
PUBLIC = "93.184.216.34"


def policy(*allowlist: str, allow_private: bool = False) -> AddressPolicy:
    return AddressPolicy(allow_private=allow_private, allowlist=parse_allowlist(allowlist))


def egress(hosts: list[str] | None = None, grants: tuple[str, ...] = ()) -> EgressPolicy:
    return EgressPolicy.parse(hosts, grants)


# --- the decision, on addresses alone ---------------------------------------------------


@pytest.mark.parametrize(
    ("hosts", "host", "allowed"),
    [
        (None, "api.example.com", True),
        (["api.example.com"], "api.example.com", True),
        (["api.example.com"], "API.Example.COM.", True),
        (["api.example.com"], "other.example.com", False),
        (["api.example.com"], "api.example.com.evil.test", False),
        (["*.example.com"], "a.b.example.com", True),
        (["*.example.com"], "example.com", False),
        (["*.example.com"], "badexample.com", False),
        (["2001:db8::1"], "[2001:DB8:0::1]", True),
        ([], "api.example.com", False),
    ],
)
def test_the_host_list_allows_only_its_hosts(
    hosts: list[str] | None, host: str, allowed: bool
) -> None:
    decision = egress(hosts).decide(policy(), PUBLIC, host=host, port=443)
    assert decision.allowed is allowed
    assert decision.reason == ("public" if allowed else "workspace_hosts")


def test_a_private_address_needs_the_operators_allowlist_and_a_grant() -> None:
    operator = policy("10.0.0.5:8080", "billing.internal:443")
    ip = "10.0.0.5"
    ungranted = egress().decide(operator, ip, host="10.0.0.5", port=8080)
    assert (ungranted.allowed, ungranted.reason, ungranted.by_workspace) == (
        False,
        "workspace_grants",
        True,
    )
    granted = egress(grants=("10.0.0.5:8080",)).decide(operator, ip, host="10.0.0.5", port=8080)
    assert (granted.allowed, granted.reason) == (True, "allowlist")
    # Another port of the same address is another destination.
    other_port = egress(grants=("10.0.0.5:8080",)).decide(operator, ip, host=ip, port=8081)
    assert (other_port.allowed, other_port.by_workspace) == (False, False)
    # A name grant: that name, on that port, whatever it resolves to inside the allowlist.
    named = egress(grants=("billing.internal:443",))
    assert named.decide(operator, "10.1.2.3", host="Billing.Internal", port=443).allowed
    assert not named.decide(operator, "10.1.2.3", host="other.internal", port=443).allowed


def test_a_grant_never_widens_the_operators_policy() -> None:
    generous = egress(grants=("10.0.0.5:8080", "169.254.169.254"))
    refused = generous.decide(policy(), "10.0.0.5", host="10.0.0.5", port=8080)
    assert (refused.allowed, refused.reason) == (False, "private_address")
    metadata = generous.decide(
        policy("169.254.169.254", allow_private=True), "169.254.169.254", host="x", port=80
    )
    assert (metadata.allowed, metadata.reason) == (False, "metadata")


def test_with_private_upstreams_allowed_grants_are_not_needed_but_the_host_list_applies() -> None:
    dev = policy(allow_private=True)
    assert egress().decide(dev, "127.0.0.1", host="127.0.0.1", port=9).allowed
    narrowed = egress(["api.example.com"]).decide(dev, "127.0.0.1", host="127.0.0.1", port=9)
    assert (narrowed.allowed, narrowed.reason) == (False, "workspace_hosts")


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("API.example.com.", "api.example.com"),
        ("*.Example.com", "*.example.com"),
        ("[2001:db8:0::1]", "2001:db8::1"),
        ("10.0.0.5", "10.0.0.5"),
        ("internal_host", "internal_host"),
        ("xn--bcher-kva.example", "xn--bcher-kva.example"),
    ],
)
def test_host_patterns_are_stored_in_one_spelling(raw: str, canonical: str) -> None:
    assert str(parse_host_pattern(raw)) == canonical


@pytest.mark.parametrize(
    "raw",
    [
        "",
        "*",
        "*.",
        "a*.example.com",
        "*.*.example.com",
        "https://api.example.com",
        "api.example.com:443",
        "api.example.com/path",
        "api example.com",
        "-api.example.com",
        "bücher.example",
        "a" * 64 + ".example.com",
        ("a" * 60 + ".") * 5 + "com",
    ],
)
def test_a_malformed_host_pattern_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_host_pattern(raw)


@pytest.mark.parametrize(
    "raw", ["", "10.0.0.5:", "host", "[::1]", "host:99999", "a b:80", "*.internal:80"]
)
def test_a_malformed_grant_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match=r"."):
        parse_grant(raw)


def test_a_grant_matches_an_address_however_it_is_spelled() -> None:
    grant = parse_grant("[::1]:8080")
    assert grant.matches(ipaddress.ip_address("::1"), "localhost", 8080)


# --- inside the real executor ------------------------------------------------------------


def executor(
    resolver: StubResolver, net: NoSockets | LoopbackOnly, operator: AddressPolicy
) -> UpstreamExecutor:
    return UpstreamExecutor(operator, FAST, resolver=resolver, connect_check=net)


def get(url: str, workspace: EgressPolicy | None) -> UpstreamRequest:
    return UpstreamRequest(method="GET", url=url, timeout_ms=2000, retries=0, egress=workspace)


async def test_a_host_outside_the_list_is_refused_before_resolving_or_dialing() -> None:
    resolver, net = StubResolver({"other.example.com": [PUBLIC]}), NoSockets()
    async with executor(resolver, net, policy()) as ex:
        with pytest.raises(UpstreamBlocked) as caught:
            await ex.execute(get(f"https://other.example.com:{PORT}/", egress(["*.api.test"])))
    assert str(caught.value) == "the workspace's egress policy does not allow other.example.com"
    assert caught.value.delivery == "not_sent"
    assert (resolver.asked, net.addresses) == ([], [])


async def test_a_listed_public_host_reaches_the_connect_check() -> None:
    resolver, net = StubResolver({"api.example.com": [PUBLIC]}), NoSockets()
    async with executor(resolver, net, policy()) as ex:
        with pytest.raises(UpstreamUnavailable):  # NoSockets refuses: the guard let it through
            await ex.execute(get(f"https://api.example.com:{PORT}/", egress(["api.example.com"])))
    assert net.addresses == [PUBLIC]


async def test_an_allowlisted_private_name_without_a_grant_is_refused_before_any_socket() -> None:
    operator = policy(f"billing.internal:{PORT}")
    resolver = StubResolver({"billing.internal": ["10.0.0.5"]})
    net = NoSockets()
    async with executor(resolver, net, operator) as ex:
        with pytest.raises(
            UpstreamBlocked, match=r"egress policy does not allow billing\.internal"
        ):
            await ex.execute(get(f"http://billing.internal:{PORT}/", egress()))
        assert net.addresses == []
        with pytest.raises(UpstreamUnavailable):  # granted: the connect check is asked
            await ex.execute(
                get(f"http://billing.internal:{PORT}/", egress(grants=(f"10.0.0.5:{PORT}",)))
            )
        # No workspace (an operator's own fetch): the operator's policy alone.
        with pytest.raises(UpstreamUnavailable):
            await ex.execute(get(f"http://billing.internal:{PORT}/", None))
    assert net.addresses == ["10.0.0.5", "10.0.0.5"]


async def test_a_name_with_public_and_ungranted_private_answers_dials_only_the_public_one() -> None:
    operator = policy(f"10.0.0.5:{PORT}")
    resolver, net = StubResolver({"mixed.example.com": ["10.0.0.5", PUBLIC]}), NoSockets()
    async with executor(resolver, net, operator) as ex:
        with pytest.raises(UpstreamUnavailable):
            await ex.execute(get(f"http://mixed.example.com:{PORT}/", egress()))
    assert net.addresses == [PUBLIC]


# A real answer is needed from here on: servers on 127.0.0.1 only.


@pytest.fixture
async def servers() -> AsyncIterator[tuple[TestServer, TestServer, list[str]]]:
    """Two loopback servers sharing one hit list; ``/to-other`` on the first
    redirects to the second, ``/to-name`` to the name ``localhost``."""
    hits: list[str] = []
    ports: dict[str, int] = {}

    async def handler(request: web.Request) -> web.Response:
        hits.append(f"{request.url.port} {request.path}")
        if request.path == "/to-other":
            raise web.HTTPFound(f"http://127.0.0.1:{ports['second']}/landed")
        if request.path == "/to-name":
            raise web.HTTPFound(f"http://localhost:{request.url.port}/landed")
        return web.Response(text="ok")

    started = []
    for name in ("first", "second"):
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", handler)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        ports[name] = server.port or 0
        started.append(server)
    try:
        yield started[0], started[1], hits
    finally:
        for server in started:
            await server.close()


async def test_a_redirect_to_an_ungranted_destination_is_refused(
    servers: tuple[TestServer, TestServer, list[str]],
) -> None:
    first, second, hits = servers
    operator = policy(f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}")
    only_first = egress(grants=(f"127.0.0.1:{first.port}",))
    async with executor(StubResolver(), LoopbackOnly(), operator) as ex:
        with pytest.raises(UpstreamBlocked, match=r"egress policy does not allow 127\.0\.0\.1$"):
            await ex.execute(get(str(first.make_url("/to-other")), only_first))
        assert hits == [f"{first.port} /to-other"]  # the second server was never asked
        both = egress(grants=(f"127.0.0.1:{first.port}", f"127.0.0.1:{second.port}"))
        response = await ex.execute(get(str(first.make_url("/to-other")), both))
    assert response.status == 200
    assert hits[-1] == f"{second.port} /landed"


async def test_a_redirect_to_a_host_outside_the_list_is_refused(
    servers: tuple[TestServer, TestServer, list[str]],
) -> None:
    first, _, hits = servers
    resolver = StubResolver({"localhost": ["127.0.0.1"]})
    async with executor(resolver, LoopbackOnly(), policy(allow_private=True)) as ex:
        with pytest.raises(UpstreamBlocked, match=r"egress policy does not allow localhost$"):
            await ex.execute(get(str(first.make_url("/to-name")), egress(["127.0.0.1"])))
    assert hits == [f"{first.port} /to-name"]
    assert resolver.asked == []


async def test_a_pooled_connection_of_a_granted_workspace_is_not_reused_for_another(
    servers: tuple[TestServer, TestServer, list[str]],
) -> None:
    first, _, hits = servers
    url = str(first.make_url("/data"))
    operator = policy(f"127.0.0.1:{first.port}")
    granted, other = egress(grants=(f"127.0.0.1:{first.port}",)), egress()
    net = LoopbackOnly()
    async with executor(StubResolver(), net, operator) as ex:
        assert (await ex.execute(get(url, granted))).status == 200  # its connection is pooled
        with pytest.raises(UpstreamBlocked, match=r"egress policy does not allow 127\.0\.0\.1$"):
            await ex.execute(get(url, other))
        assert (await ex.execute(get(url, granted))).status == 200  # the pool still serves it
    assert hits == [f"{first.port} /data", f"{first.port} /data"]
    assert net.addresses == ["127.0.0.1"]  # one pinned client, built once, reused by the grantee
