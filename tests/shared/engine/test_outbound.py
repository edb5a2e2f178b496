"""The executor against real aiohttp servers on 127.0.0.1.

Every executor here gets a connect check that refuses any non-loopback
address before a client that could dial it exists, so even a broken guard
sends nothing off this machine; the guard's own refusals are asserted separately.
"""

from __future__ import annotations

import asyncio
import gzip
import ipaddress
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from email.utils import formatdate

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from yarl import URL

from shared.engine.outbound import (
    ExecutorConfig,
    UpstreamBlocked,
    UpstreamExecutor,
    UpstreamRequest,
    UpstreamResponseInvalid,
    UpstreamResponseTooLarge,
    UpstreamTimeout,
    UpstreamUnavailable,
    _redirect,
    parse_retry_after,
)
from shared.engine.ssrf import AddressPolicy, parse_allowlist
from tests.support.gateway import serve_no_http
from tests.support.sockets import StubResolver

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
FAST = ExecutorConfig(backoff_base_s=0.01, backoff_cap_s=0.02)


class SocketNet:
    """Records every address a client is pinned to; refuses all but loopback."""

    def __init__(self) -> None:
        self.addresses: list[str] = []

    def __call__(self, ip: str, port: int) -> None:
        self.addresses.append(ip)
        if not ipaddress.ip_address(ip).is_loopback:
            raise ConnectionRefusedError(f"test net: refused {ip}")


def text_handler(text: str) -> Handler:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(text=text)

    return handler


async def serve(handler: Handler, path: str = "/{tail:.*}") -> TestServer:
    app = web.Application()
    app.router.add_route("*", path, handler)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    return server


@pytest.fixture
async def servers() -> AsyncIterator[list[TestServer]]:
    started: list[TestServer] = []
    yield started
    for server in started:
        await server.close()


def executor(
    *ports: int | None,
    config: ExecutorConfig = FAST,
    resolver: StubResolver | None = None,
    net: SocketNet | None = None,
    allow_private: bool = False,
) -> UpstreamExecutor:
    policy = AddressPolicy(
        allow_private=allow_private,
        allowlist=parse_allowlist([f"127.0.0.1:{p}" for p in ports if p]),
    )
    return UpstreamExecutor(policy, config, resolver=resolver, connect_check=net or SocketNet())


def get(url: str, **kwargs: object) -> UpstreamRequest:
    return UpstreamRequest(method="GET", url=url, **kwargs)  # type: ignore[arg-type]


async def test_a_slow_upstream_raises_upstream_timeout(servers: list[TestServer]) -> None:
    release = asyncio.Event()

    async def slow(request: web.Request) -> web.Response:
        await asyncio.wait_for(release.wait(), 5)
        return web.Response(text="late")

    server = await serve(slow)
    servers.append(server)
    async with executor(server.port) as ex:
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout) as caught:
            await ex.execute(get(str(server.make_url("/")), timeout_ms=100, retries=0))
    release.set()
    assert caught.value.code == "upstream_timeout"
    assert (caught.value.attempts, caught.value.delivery) == (1, "unknown")
    assert time.monotonic() - started < 1


async def test_a_503_is_retried_until_success(servers: list[TestServer]) -> None:
    hits: list[int] = []

    async def flaky(request: web.Request) -> web.Response:
        hits.append(1)
        return web.Response(status=503 if len(hits) < 3 else 200, text=str(len(hits)))

    server = await serve(flaky)
    servers.append(server)
    async with executor(server.port) as ex:
        response = await ex.execute(get(str(server.make_url("/")), retries=2))
    assert (response.status, response.body, response.attempts, len(hits)) == (200, b"3", 3, 3)


async def test_retries_stop_at_the_bound_and_return_the_last_answer(
    servers: list[TestServer],
) -> None:
    hits: list[int] = []

    async def down(request: web.Request) -> web.Response:
        hits.append(1)
        return web.Response(status=502)

    server = await serve(down)
    servers.append(server)
    async with executor(server.port) as ex:
        response = await ex.execute(get(str(server.make_url("/")), retries=1))
    assert (response.status, response.attempts, len(hits)) == (502, 2, 2)


async def test_a_404_is_not_retried(servers: list[TestServer]) -> None:
    hits: list[int] = []

    async def missing(request: web.Request) -> web.Response:
        hits.append(1)
        return web.Response(status=404)

    server = await serve(missing)
    servers.append(server)
    async with executor(server.port) as ex:
        response = await ex.execute(get(str(server.make_url("/")), retries=2))
    assert (response.status, response.attempts, len(hits)) == (404, 1, 1)


async def test_post_without_idempotency_key_is_never_repeated(servers: list[TestServer]) -> None:
    hits: list[bytes] = []

    async def busy(request: web.Request) -> web.Response:
        hits.append(await request.read())
        return web.Response(status=503)

    server = await serve(busy)
    servers.append(server)
    url = str(server.make_url("/orders"))
    async with executor(server.port) as ex:
        plain = await ex.execute(
            UpstreamRequest(
                method="POST", url=url, body=b"{}", retries=2, idempotency_header="Idempotency-Key"
            )
        )
        assert (plain.status, plain.attempts, len(hits)) == (503, 1, 1)
        keyed = await ex.execute(
            UpstreamRequest(
                method="POST",
                url=url,
                body=b"{}",
                headers=(("Idempotency-Key", "k1"),),
                retries=2,
                idempotency_header="Idempotency-Key",
            )
        )
    assert (keyed.status, keyed.attempts, len(hits)) == (503, 3, 4)
    assert hits == [b"{}"] * 4


async def test_retry_after_is_honoured(servers: list[TestServer]) -> None:
    hits: list[float] = []

    async def limited(request: web.Request) -> web.Response:
        hits.append(time.monotonic())
        if len(hits) == 1:
            return web.Response(status=429, headers={"Retry-After": "1"})
        return web.Response(text="ok")

    server = await serve(limited)
    servers.append(server)
    async with executor(server.port) as ex:
        response = await ex.execute(get(str(server.make_url("/")), timeout_ms=2000, retries=1))
    assert (response.status, response.attempts) == (200, 2)
    assert hits[1] - hits[0] >= 0.95


@pytest.mark.parametrize(
    ("retry_after", "timeout_ms"),
    [("30", 10_000), ("5", 200)],  # over the cap; over the remaining budget
)
async def test_a_retry_after_beyond_the_cap_or_budget_returns_at_once(
    servers: list[TestServer], retry_after: str, timeout_ms: int
) -> None:
    hits: list[int] = []

    async def limited(request: web.Request) -> web.Response:
        hits.append(1)
        return web.Response(status=503, headers={"Retry-After": retry_after})

    server = await serve(limited)
    servers.append(server)
    config = ExecutorConfig(retry_after_cap_s=10, backoff_base_s=0.01)
    async with executor(server.port, config=config) as ex:
        started = time.monotonic()
        response = await ex.execute(get(str(server.make_url("/")), timeout_ms=timeout_ms))
    assert time.monotonic() - started < 0.5
    assert (response.status, response.attempts, len(hits)) == (503, 1, 1)
    assert response.header("retry-after") == retry_after


def test_retry_after_reads_seconds_and_http_dates() -> None:
    now = 1_800_000_000.0
    assert parse_retry_after("7", now=now) == 7.0
    assert parse_retry_after(formatdate(now + 12, usegmt=True), now=now) == pytest.approx(12)
    assert parse_retry_after(formatdate(now - 60, usegmt=True), now=now) == 0.0
    assert parse_retry_after("soon", now=now) is None
    assert parse_retry_after(None) is None


@pytest.mark.parametrize("chunked", [False, True])
async def test_a_body_over_the_raw_limit_is_refused(
    servers: list[TestServer], chunked: bool
) -> None:
    async def big(request: web.Request) -> web.StreamResponse:
        if not chunked:
            return web.Response(body=b"x" * 5000)
        response = web.StreamResponse()
        response.enable_chunked_encoding()
        await response.prepare(request)
        for _ in range(5):
            await response.write(b"x" * 1000)
        await response.write_eof()
        return response

    server = await serve(big)
    servers.append(server)
    config = ExecutorConfig(max_response_bytes=4000)
    async with executor(server.port, config=config) as ex:
        with pytest.raises(UpstreamResponseTooLarge):
            await ex.execute(get(str(server.make_url("/")), retries=0))
        exact = ExecutorConfig(max_response_bytes=5000)
    async with executor(server.port, config=exact) as ex:
        response = await ex.execute(get(str(server.make_url("/"))))
    assert len(response.body) == 5000


async def test_a_redirect_to_an_allowed_loopback_port_is_followed(
    servers: list[TestServer],
) -> None:
    seen: list[dict[str, str]] = []

    async def target(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.Response(text=f"{request.method} {request.path_qs}")

    b = await serve(target)
    servers.append(b)

    async def bounce(request: web.Request) -> web.Response:
        raise web.HTTPFound(str(b.make_url("/final?x=1")))

    a = await serve(bounce)
    servers.append(a)
    async with executor(a.port, b.port) as ex:
        response = await ex.execute(
            get(str(a.make_url("/start")), headers=(("Authorization", "Bearer s"), ("X-Key", "k")))
        )
    assert (response.status, response.body) == (200, b"GET /final?x=1")
    assert response.url == str(b.make_url("/final?x=1"))
    assert "Authorization" not in seen[0]  # another origin: credentials dropped
    assert "X-Key" not in seen[0]


async def test_a_redirect_to_a_loopback_port_not_allowlisted_is_blocked(
    servers: list[TestServer],
) -> None:
    b = await serve(text_handler("secret"))
    servers.append(b)

    async def bounce(request: web.Request) -> web.Response:
        raise web.HTTPFound(str(b.make_url("/")))

    a = await serve(bounce)
    servers.append(a)
    async with executor(a.port) as ex:
        with pytest.raises(UpstreamBlocked):
            await ex.execute(get(str(a.make_url("/"))))


async def test_a_redirect_to_a_private_address_is_refused_before_connecting(
    servers: list[TestServer],
) -> None:
    async def bounce(request: web.Request) -> web.Response:
        raise web.HTTPFound("http://internal.test:8080/admin")

    a = await serve(bounce)
    servers.append(a)
    resolver = StubResolver({"internal.test": ["10.0.0.5"]})
    net = SocketNet()
    async with executor(a.port, resolver=resolver, net=net) as ex:
        with pytest.raises(UpstreamBlocked) as caught:
            await ex.execute(get(str(a.make_url("/"))))
    assert caught.value.code == "upstream_blocked"
    assert resolver.asked == ["internal.test"]
    assert net.addresses == ["127.0.0.1"]  # only the first hop was ever dialled


@pytest.mark.parametrize(
    "url", ["http://10.0.0.5:8080/", "http://[::ffff:10.0.0.5]:8080/", "http://169.254.169.254/"]
)
async def test_an_ip_literal_is_judged_like_a_resolved_address(url: str) -> None:
    net = SocketNet()
    async with executor(net=net) as ex:
        with pytest.raises(UpstreamBlocked):
            await ex.execute(get(url, retries=0))
    assert net.addresses == []


async def test_metadata_stays_refused_with_private_upstreams_allowed() -> None:
    resolver = StubResolver({"metadata.google.internal": ["169.254.169.254"]})
    net = SocketNet()
    async with executor(resolver=resolver, net=net, allow_private=True) as ex:
        with pytest.raises(UpstreamBlocked):
            await ex.execute(get("http://metadata.google.internal/computeMetadata/v1/"))
    assert net.addresses == []


async def test_only_the_allowed_addresses_of_a_name_are_connected_to(
    servers: list[TestServer],
) -> None:
    server = await serve(text_handler("ok"))
    servers.append(server)
    resolver = StubResolver({"mixed.test": ["10.0.0.5", "127.0.0.1"]})
    net = SocketNet()
    async with executor(server.port, resolver=resolver, net=net) as ex:
        response = await ex.execute(get(f"http://mixed.test:{server.port}/"))
    assert response.body == b"ok"
    assert net.addresses == ["127.0.0.1"]


@pytest.mark.parametrize(
    ("status", "method", "expected"),
    [
        (303, "POST", "GET b''"),
        (302, "POST", "GET b''"),
        (301, "PUT", "PUT b'data'"),
        (307, "POST", "POST b'data'"),
        (308, "PATCH", "PATCH b'data'"),
    ],
)
async def test_redirects_keep_or_drop_method_and_body_as_browsers_do(
    servers: list[TestServer], status: int, method: str, expected: str
) -> None:
    async def handler(request: web.Request) -> web.Response:
        if request.path == "/start":
            return web.Response(status=status, headers={"Location": "/next"})
        return web.Response(text=f"{request.method} {await request.read()!r}")

    server = await serve(handler)
    servers.append(server)
    async with executor(server.port) as ex:
        response = await ex.execute(
            UpstreamRequest(method=method, url=str(server.make_url("/start")), body=b"data")
        )
    assert response.body.decode() == expected


async def test_a_redirect_loop_ends_as_an_invalid_response(servers: list[TestServer]) -> None:
    hits: list[int] = []

    async def loop(request: web.Request) -> web.Response:
        hits.append(1)
        return web.Response(status=302, headers={"Location": f"/n{len(hits)}"})

    server = await serve(loop)
    servers.append(server)
    async with executor(server.port) as ex:
        with pytest.raises(UpstreamResponseInvalid):
            await ex.execute(get(str(server.make_url("/"))))
    assert len(hits) == 6  # the request and 5 redirects


@pytest.mark.parametrize("location", ["file:///etc/passwd", "gopher://127.0.0.1:70/"])
async def test_a_redirect_to_another_scheme_is_blocked(
    servers: list[TestServer], location: str
) -> None:
    async def bounce(request: web.Request) -> web.Response:
        return web.Response(status=302, headers={"Location": location})

    server = await serve(bounce)
    servers.append(server)
    async with executor(server.port) as ex:
        with pytest.raises(UpstreamBlocked):
            await ex.execute(get(str(server.make_url("/"))))


async def test_a_refused_connection_is_retried_then_reported_unavailable() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    async with executor(port) as ex:
        with pytest.raises(UpstreamUnavailable) as caught:
            await ex.execute(get(f"http://127.0.0.1:{port}/", retries=2))
    assert caught.value.attempts == 3


async def test_environment_proxies_are_ignored(
    servers: list[TestServer], monkeypatch: pytest.MonkeyPatch
) -> None:
    proxied: list[str] = []

    async def proxy(request: web.Request) -> web.Response:
        proxied.append(str(request.url))
        return web.Response(text="proxy")

    p = await serve(proxy)
    servers.append(p)
    upstream = await serve(text_handler("direct"))
    servers.append(upstream)
    monkeypatch.setenv("HTTP_PROXY", str(p.make_url("/")))
    monkeypatch.setenv("http_proxy", str(p.make_url("/")))
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    async with executor(p.port, upstream.port) as ex:
        response = await ex.execute(get(str(upstream.make_url("/"))))
    assert (response.body, proxied) == (b"direct", [])


async def test_a_slow_host_cannot_starve_another(servers: list[TestServer]) -> None:
    release = asyncio.Event()
    two_inside = asyncio.Event()
    inside: list[int] = []

    async def slow(request: web.Request) -> web.Response:
        inside.append(1)
        if len(inside) == 2:
            two_inside.set()
        await asyncio.wait_for(release.wait(), 5)
        return web.Response(text="slow")

    a = await serve(slow)
    servers.append(a)
    b = await serve(text_handler("fast"))
    servers.append(b)
    config = ExecutorConfig(limit=10, limit_per_host=2)
    async with executor(a.port, b.port, config=config) as ex:
        pending = [
            asyncio.create_task(ex.execute(get(str(a.make_url("/")), timeout_ms=4000, retries=0)))
            for _ in range(4)
        ]
        await asyncio.wait_for(two_inside.wait(), 2)
        started = time.monotonic()
        fast = await ex.execute(get(str(b.make_url("/")), timeout_ms=1000, retries=0))
        assert time.monotonic() - started < 0.5
        assert fast.body == b"fast"
        await asyncio.sleep(0.1)
        assert len(inside) == 2  # the per-host cap holds the other two back
        release.set()
        results = await asyncio.gather(*pending)
    assert [r.body for r in results] == [b"slow"] * 4


async def test_a_compressed_body_is_limited_by_its_decoded_size(servers: list[TestServer]) -> None:
    async def bomb(request: web.Request) -> web.Response:
        packed = gzip.compress(b"0" * 200_000)
        return web.Response(body=packed, headers={"Content-Encoding": "gzip"})

    server = await serve(bomb)
    servers.append(server)
    async with executor(server.port, config=ExecutorConfig(max_response_bytes=10_000)) as ex:
        with pytest.raises(UpstreamResponseTooLarge):
            await ex.execute(get(str(server.make_url("/"))))


async def test_a_timed_out_get_is_retried_within_the_budget(servers: list[TestServer]) -> None:
    hits: list[int] = []
    release = asyncio.Event()

    async def first_slow(request: web.Request) -> web.Response:
        hits.append(1)
        if len(hits) == 1:
            await asyncio.wait_for(release.wait(), 5)
        return web.Response(text=str(len(hits)))

    server = await serve(first_slow)
    servers.append(server)
    async with executor(server.port) as ex:
        response = await ex.execute(get(str(server.make_url("/")), timeout_ms=200, retries=1))
    release.set()
    assert (response.body, response.attempts) == (b"2", 2)
    assert response.elapsed_ms < 400


async def test_a_redirect_without_location_is_returned_as_is(servers: list[TestServer]) -> None:
    async def odd(request: web.Request) -> web.Response:
        return web.Response(status=302, text="nowhere")

    server = await serve(odd)
    servers.append(server)
    async with executor(server.port) as ex:
        response = await ex.execute(get(str(server.make_url("/"))))
    assert (response.status, response.body) == (302, b"nowhere")


def test_a_redirect_from_https_to_http_is_blocked() -> None:
    with pytest.raises(UpstreamBlocked):
        _redirect(302, "GET", URL("https://api.test/a"), (), None, "http://api.test/b")


def test_a_same_origin_redirect_keeps_credentials_and_another_origin_drops_them() -> None:
    headers = (("Authorization", "Bearer s"), ("Accept", "application/json"), ("X-Key", "k"))
    _, _, same, _ = _redirect(307, "GET", URL("https://api.test/a"), headers, None, "/b")
    _, _, other, _ = _redirect(
        307, "GET", URL("https://api.test/a"), headers, None, "https://api.test:8443/b"
    )
    assert same == headers
    assert other == (("Accept", "application/json"),)


async def test_a_cookie_an_upstream_sets_is_never_sent_back(servers: list[TestServer]) -> None:
    """One session serves every agent and workspace, so it must keep no cookies."""
    seen: list[str | None] = []

    async def sets_a_cookie(request: web.Request) -> web.Response:
        seen.append(request.headers.get("Cookie"))
        response = web.Response(text="ok")
        response.set_cookie("session", "agent-a-secret")
        return response

    server = await serve(sets_a_cookie)
    servers.append(server)
    # A host name: aiohttp's default jar would keep this cookie (it skips IP hosts).
    async with executor(server.port) as ex:
        for _ in range(2):
            answer = await ex.execute(get(f"http://localhost:{server.port}/"))
            assert answer.status == 200
    assert seen == [None, None]


async def test_a_timed_out_attempt_closes_its_connection_at_the_upstream() -> None:
    """The deadline reaches reqwest itself: a cancelled await alone would leave
    the Rust request (and its connection) running after the attempt ended."""
    closed = asyncio.Event()

    async def hold(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        await reader.read(1)  # returns b"" once the client closes the connection
        closed.set()
        writer.close()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with executor(port) as ex:
            with pytest.raises(UpstreamTimeout):
                await ex.execute(get(f"http://127.0.0.1:{port}/", timeout_ms=200, retries=0))
            await asyncio.wait_for(closed.wait(), 1)
    finally:
        server.close()
        await server.wait_closed()


async def test_clients_past_the_cache_size_are_closed_and_built_again(
    servers: list[TestServer],
) -> None:
    one, two = await serve(text_handler("one")), await serve(text_handler("two"))
    servers.extend((one, two))
    net = SocketNet()
    config = ExecutorConfig(max_clients=1)
    async with executor(one.port, two.port, config=config, net=net) as ex:
        bodies = [
            (await ex.execute(get(str(server.make_url("/"))))).body
            for server in (one, two, one, one)
        ]
    assert bodies == [b"one", b"two", b"one", b"one"]
    assert net.addresses == ["127.0.0.1"] * 3  # the evicted client for `one` was rebuilt once


async def test_an_answer_that_is_no_http_is_invalid_and_its_reason_names_no_url() -> None:
    """The reason reaches the call log, approval records and logs (docs/security.md,
    "What logs never hold"): reqwest's "error sending request for url (...)" would
    carry the path and query values of the call."""

    async with serve_no_http() as port, executor(port) as ex:
        with pytest.raises(UpstreamResponseInvalid) as caught:
            await ex.execute(get(f"http://127.0.0.1:{port}/orders/argvalue-1?q=argvalue-2"))
    assert str(caught.value) == "unusable upstream answer: invalid HTTP version parsed"
