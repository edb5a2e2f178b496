"""Hostile and broken access tokens through a real gateway over HTTP, and opaque
tokens end to end (docs/architecture.md, "Identity"; docs/security.md, "Access
tokens").

The identity providers are loopback servers the test controls fully
(``tests.support.identity.LoopbackIdP``): OpenID discovery, a JWKS of keys made
here, and an RFC 7662 introspection endpoint that checks HTTP Basic credentials.
So the tokens can be what no real IdP would mint: unsigned, HMAC-keyed with the
public key, carrying their own key or pointing at one, for another agent or
origin. Every one must be refused with 401, the reason in ``WWW-Authenticate``
and in the JSON-RPC error, and without reaching the upstream.

One workspace, set up through the admin API, serves the whole module: agents
``shop`` and ``other`` trust provider ``keys`` (JWTs: an RS256 key and a P-521
key, ES512, which the default algorithm list leaves out); agent ``desk``
trusts provider ``opaque`` (introspection, its client secret a workspace secret).
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from aiohttp import web
from joserfc import jwe
from joserfc.jwk import ECKey, RSAKey
from litestar import Litestar
from litestar.testing import AsyncTestClient

from shared.identity.access_tokens import MAX_TOKEN_CHARS
from tests.support.api import auth, make_token
from tests.support.db import emptied_run_database
from tests.support.gateway import Gateway, run_gateway, serve_upstream
from tests.support.identity import (
    JwksServer,
    LoopbackIdP,
    claims,
    hmac_with_public_pem,
    jwks,
    rsa_key,
    serve_idp,
    serve_jwks,
    sign,
)
from tests.support.mcp import META, modern
from tests.support.processes import free_port
from tests.support.tool_calls import ok, rpc

WS = "/api/v1/workspaces/acme"
INTROSPECTION_SECRET = "idp_introspection"  # the workspace secret's name


@dataclass
class World:
    gateway: Gateway
    url: str  # the gateway's public URL
    http: httpx.AsyncClient
    idp: LoopbackIdP  # provider "keys": JWTs
    opaque_idp: LoopbackIdP  # provider "opaque": introspection
    lure: JwksServer  # where hostile jku and x5u headers point; must never be asked
    signing: RSAKey  # published by idp, RS256
    es512: ECKey  # published by idp too; ES512 is not in the default list
    attacker: RSAKey  # published nowhere
    upstream: list[dict[str, str]] = field(default_factory=list)  # each request's headers

    def resource(self, slug: str) -> str:
        return f"{self.url}/mcp/v1/acme/{slug}"

    def claims(self, slug: str = "shop", **extra: Any) -> dict[str, Any]:
        """Valid claims for agent ``slug`` now; ``extra`` overrides (None drops a claim)."""
        now = int(time.time())
        valid = {"aud": self.resource(slug), "exp": now + 600, "iat": now - 10}
        return claims(self.idp.issuer, **{**valid, "scope": "shop:read", **extra})

    def token(
        self,
        *,
        alg: str = "RS256",
        key: RSAKey | ECKey | None = None,
        header: dict[str, Any] | None = None,
        **extra: Any,
    ) -> str:
        """A JWT signed with ``key`` (the IdP's RS256 key by default); ``header``
        overrides the usual one (None drops a member), ``extra`` the claims."""
        key = key or self.signing
        usual: dict[str, Any] = {"alg": alg, "typ": "at+jwt", "kid": key.kid}
        merged = {k: v for k, v in {**usual, **(header or {})}.items() if v is not None}
        return sign(merged, self.claims(**extra), key, alg)


def _upstream(seen: list[dict[str, str]]) -> web.Application:
    """The operation's upstream; ``seen`` gets the headers of each request."""

    async def answer(request: web.Request) -> web.Response:
        seen.append(dict(request.headers))
        return web.json_response({"path": request.path})

    app = web.Application()
    app.router.add_get("/{name}", answer)
    return app


def _agent(slug: str, provider: str) -> dict[str, Any]:
    return {
        "slug": slug,
        "title": f"The {slug}",
        "operations": ["hours"],
        "auth": {"providers": [provider], "scopes": ["shop:read"]},
    }


@pytest.fixture(scope="module")
async def world(
    pg_server_url: str, run_database: str, app: Litestar, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[World]:
    url = emptied_run_database(pg_server_url, run_database)
    signing = rsa_key("rsa-signing")
    es512 = ECKey.generate_key("P-521", parameters={"kid": "ec-p521"}, private=True)
    attacker = rsa_key("attacker")
    seen: list[dict[str, str]] = []
    async with (
        serve_idp(signing, es512) as idp,
        serve_idp(rsa_key("opaque-idp")) as opaque_idp,
        serve_jwks(jwks(attacker)) as lure,
        serve_upstream(_upstream(seen)) as upstream_port,
    ):
        admin = await make_token(url, "admin")
        async with AsyncTestClient(app=app) as client:
            await ok(
                await client.post("/api/v1/workspaces", json={"slug": "acme"}, headers=auth(admin))
            )
            # The introspection client's secret is a workspace secret; the provider names it.
            await ok(
                await client.put(
                    f"{WS}/secrets/{INTROSPECTION_SECRET}",
                    json={"value": opaque_idp.client_secret},
                    headers=auth(admin),
                )
            )
            file = {
                "workspace": "acme",
                "identity_providers": [
                    {"name": "keys", "issuer": idp.issuer},
                    {
                        "name": "opaque",
                        "issuer": opaque_idp.issuer,
                        "introspection": {
                            "client_id": opaque_idp.client_id,
                            "client_secret": INTROSPECTION_SECRET,
                        },
                    },
                ],
                "operations": [
                    {
                        "name": "hours",
                        "description": "Reads the opening hours. Use when the user asks for them.",
                        "input": {
                            "type": "object",
                            "properties": {},
                            "additionalProperties": False,
                        },
                        "request": {
                            "method": "GET",
                            "url": f"http://127.0.0.1:{upstream_port}/hours",
                        },
                    }
                ],
                "agents": [
                    _agent("shop", "keys"),
                    _agent("other", "keys"),
                    _agent("desk", "opaque"),
                ],
            }
            await ok(
                await client.post(
                    f"{WS}/apply", params={"publish": "true"}, json=file, headers=auth(admin)
                )
            )
        port = free_port()
        public = f"http://127.0.0.1:{port}"
        env = {"CRANK_PUBLIC_URL": public, "CRANK_ALLOW_LOOPBACK_UPSTREAMS": "true"}
        async with (
            run_gateway(
                url, tmp_path_factory.mktemp("crafted"), port=port, extra_env=env
            ) as gateway,
            httpx.AsyncClient(base_url=public, timeout=20) as http,
        ):
            world = World(
                gateway, public, http, idp, opaque_idp, lure, signing, es512, attacker, seen
            )
            # The first token discovers the provider and fetches its keys.
            assert (await _call(world, "shop", world.token())).status_code == 200
            yield world


async def _call(
    world: World, slug: str, token: str, extensions: dict[str, Any] | None = None
) -> httpx.Response:
    """tools/call of ``hours`` at agent ``slug`` with ``token`` (modern era)."""
    return await world.http.post(
        f"/mcp/v1/acme/{slug}",
        json=rpc("tools/call", {"name": "hours", "arguments": {}, "_meta": META}),
        headers=modern(token, "tools/call", **{"Mcp-Name": "hours"}),
        extensions=extensions,
    )


def _assert_answered(answer: httpx.Response) -> None:
    assert answer.status_code == 200, answer.text
    assert answer.json()["result"]["structuredContent"] == {"path": "/hours"}


def _assert_refused(world: World, slug: str, answer: httpx.Response, reason: str) -> None:
    assert answer.status_code == 401, answer.text
    challenge = answer.headers["www-authenticate"]
    assert challenge.startswith(f'Bearer error="invalid_token", error_description="{reason}"'), (
        challenge
    )
    metadata = f"{world.url}/.well-known/oauth-protected-resource/mcp/v1/acme/{slug}"
    assert f'resource_metadata="{metadata}"' in challenge
    assert answer.json()["error"]["data"] == {"reason": reason}


def _bad_signature(w: World) -> str:
    """A valid header and claims under the signature of other claims."""
    head, body, _ = w.token().split(".")
    other = w.token(sub="someone-else").split(".")[2]
    return f"{head}.{body}.{other}"


def _jwe(w: World) -> str:
    """An encrypted token (five parts) to the IdP's own key: not a JWS."""
    header = {"alg": "RSA-OAEP", "enc": "A256GCM", "typ": "at+jwt", "kid": w.signing.kid}
    return jwe.encrypt_compact(header, json.dumps(w.claims()), w.signing)


def _oversize(w: World) -> str:
    token = w.token(padding="x" * MAX_TOKEN_CHARS)  # well signed, only too long
    assert len(token) > MAX_TOKEN_CHARS
    return token


# Each crafted token: how it is made, and the reason the gateway must give.
CRAFTED: dict[str, tuple[Callable[[World], str], str]] = {
    "alg-none-unsigned": (
        lambda w: sign(
            {"alg": "none", "typ": "at+jwt", "kid": w.signing.kid}, w.claims(), None, "none"
        ),
        "algorithm_not_allowed",
    ),
    "hs256-keyed-with-the-rsa-public-key": (
        lambda w: hmac_with_public_pem(
            {"alg": "HS256", "typ": "at+jwt", "kid": w.signing.kid}, w.claims(), w.signing
        ),
        "algorithm_not_allowed",
    ),
    "jwk-header-of-the-attacker": (
        lambda w: w.token(key=w.attacker, header={"jwk": w.attacker.as_dict(private=False)}),
        "forbidden_header",
    ),
    "jku-at-the-attackers-key-set": (
        lambda w: w.token(key=w.attacker, header={"jku": w.lure.url}),
        "forbidden_header",
    ),
    "x5u-at-the-attackers-certificate": (
        lambda w: w.token(key=w.attacker, header={"x5u": f"{w.lure.base()}/x5u"}),
        "forbidden_header",
    ),
    "x5c-carrying-the-attackers-key": (
        lambda w: w.token(key=w.attacker, header={"x5c": [w.attacker.as_dict()["n"]]}),
        "forbidden_header",
    ),
    "crit-extension-not-understood": (
        lambda w: w.token(header={"crit": ["exp-ext"], "exp-ext": 1}),
        "forbidden_header",
    ),
    "es512-published-key-not-in-the-list": (
        lambda w: w.token(alg="ES512", key=w.es512),
        "algorithm_not_allowed",
    ),
    "rs256-naming-the-ec-key": (
        # The header's algorithm and the key it names must fit each other.
        lambda w: w.token(header={"kid": w.es512.kid}),
        "algorithm_not_allowed",
    ),
    "es256-naming-the-p521-key": (
        lambda w: w.token(alg="ES256", key=w.es512),
        "algorithm_not_allowed",
    ),
    "typ-missing": (lambda w: w.token(header={"typ": None}), "wrong_type"),
    "typ-jwt-where-only-at+jwt": (
        lambda w: w.token(header={"typ": "JWT"}),
        "wrong_type",
    ),
    "kid-unknown": (lambda w: w.token(header={"kid": "rotated-away"}), "unknown_key"),
    "no-kid-with-two-keys-published": (lambda w: w.token(header={"kid": None}), "missing_key_id"),
    "iss-with-a-trailing-slash": (lambda w: w.token(iss=f"{w.idp.issuer}/"), "wrong_issuer"),
    "iss-of-a-provider-the-agent-does-not-trust": (
        lambda w: w.token(iss=w.opaque_idp.issuer),
        "wrong_issuer",
    ),
    "aud-another-agents-url": (lambda w: w.token(aud=w.resource("other")), "wrong_audience"),
    "aud-the-right-path-on-another-origin": (
        lambda w: w.token(aud=w.resource("shop").replace("127.0.0.1", "localhost")),
        "wrong_audience",
    ),
    "expired-beyond-the-leeway": (
        lambda w: w.token(exp=int(time.time()) - 60, iat=int(time.time()) - 600),
        "expired",
    ),
    "nbf-in-the-future": (lambda w: w.token(nbf=int(time.time()) + 120), "not_yet_valid"),
    "iat-in-the-future": (lambda w: w.token(iat=int(time.time()) + 120), "issued_in_future"),
    "exp-missing": (lambda w: w.token(exp=None), "missing_claim"),
    "bad-signature": (_bad_signature, "bad_signature"),
    "jwe-five-parts": (_jwe, "malformed"),
    "oversize-over-16-kib": (_oversize, "malformed"),
}


@pytest.mark.parametrize("case", list(CRAFTED))
async def test_a_crafted_token_is_refused_with_its_reason_and_reaches_nothing(
    world: World, case: str
) -> None:
    make, reason = CRAFTED[case]
    token = make(world)
    upstream_before = len(world.upstream)
    for _ in range(2):  # a refusal, once remembered, stays a refusal
        _assert_refused(world, "shop", await _call(world, "shop", token), reason)
    assert len(world.upstream) == upstream_before
    # A token never picks its own key: jku and x5u are refused unread.
    assert world.lure.requests == 0


async def test_a_valid_token_is_accepted_and_not_passed_through(world: World) -> None:
    token = world.token()
    _assert_answered(await _call(world, "shop", token))
    assert "Authorization" not in world.upstream[-1]
    assert not [v for v in world.upstream[-1].values() if token in v]


async def test_a_refused_token_is_not_remembered_as_accepted(world: World) -> None:
    # One token, two agents: the audience is part of what is remembered.
    token = world.token()
    _assert_answered(await _call(world, "shop", token))
    _assert_refused(world, "other", await _call(world, "other", token), "wrong_audience")
    _assert_answered(await _call(world, "shop", token))
    _assert_refused(world, "other", await _call(world, "other", token), "wrong_audience")
    # A token refused for a while (nbf ahead) and a valid twin differing only
    # in it: neither answer leaks into the other.
    later = world.token(nbf=int(time.time()) + 120, jti="twin")
    now = world.token(jti="twin")
    _assert_refused(world, "shop", await _call(world, "shop", later), "not_yet_valid")
    _assert_answered(await _call(world, "shop", now))
    _assert_refused(world, "shop", await _call(world, "shop", later), "not_yet_valid")


async def test_tokens_with_made_up_kids_cannot_make_the_gateway_hammer_the_jwks(
    world: World,
) -> None:
    before = world.idp.requests["/jwks"]
    for _ in range(2):
        tokens = [world.token(header={"kid": secrets.token_hex(8)}) for _ in range(25)]
        answers = await asyncio.gather(*(_call(world, "shop", t) for t in tokens))
        for answer in answers:
            _assert_refused(world, "shop", answer, "unknown_key")
    # At most one refetch per 30 s, whatever number of unknown kids.
    assert world.idp.requests["/jwks"] - before <= 1
    _assert_answered(await _call(world, "shop", world.token()))


# Opaque tokens (RFC 7662), at agent desk.


def _opaque(world: World, slug: str = "desk", **answer: Any) -> str:
    """A new opaque token the IdP knows as active for agent ``slug``; ``answer``
    overrides its introspection answer."""
    token = secrets.token_urlsafe(32)
    usual = {
        "active": True,
        "iss": world.opaque_idp.issuer,
        "sub": "desk-user",
        "aud": [world.resource(slug), "https://api.elsewhere.example"],
        "scope": "shop:read",
        "client_id": "desk-client",
        "exp": int(time.time()) + 600,
    }
    world.opaque_idp.opaque[token] = {**usual, **answer}
    return token


def _introspections(world: World) -> int:
    return world.opaque_idp.requests["/introspect"]


async def test_an_active_opaque_token_calls_tools_and_never_reaches_the_upstream(
    world: World,
) -> None:
    token = _opaque(world)
    before = _introspections(world)
    _assert_answered(await _call(world, "desk", token))
    assert _introspections(world) == before + 1
    assert world.opaque_idp.bad_credentials == 0  # the client id and secret, as configured
    assert "Authorization" not in world.upstream[-1]
    assert not [v for v in world.upstream[-1].values() if token in v]
    # A JWT never goes to introspection, even at an agent whose provider introspects.
    _assert_refused(world, "desk", await _call(world, "desk", world.token()), "wrong_issuer")
    assert _introspections(world) == before + 1


async def test_an_inactive_or_foreign_opaque_token_is_refused(world: World) -> None:
    unknown = secrets.token_urlsafe(32)  # the IdP answers active: false
    _assert_refused(world, "desk", await _call(world, "desk", unknown), "inactive")
    elsewhere = _opaque(world, aud="https://api.elsewhere.example")
    _assert_refused(world, "desk", await _call(world, "desk", elsewhere), "wrong_audience")
    other_agent = _opaque(world, aud=world.resource("shop"))
    _assert_refused(world, "desk", await _call(world, "desk", other_agent), "wrong_audience")
    expired = _opaque(world, exp=int(time.time()) - 60)
    _assert_refused(world, "desk", await _call(world, "desk", expired), "expired")


async def test_concurrent_calls_with_a_new_opaque_token_share_one_introspection(
    world: World,
) -> None:
    token = _opaque(world)
    before = _introspections(world)
    sent = 0
    all_sent = asyncio.Event()
    callers = 8

    async def trace(name: str, info: dict[str, Any]) -> None:
        nonlocal sent
        if name == "http11.send_request_body.complete":
            sent += 1
            if sent == callers:
                all_sent.set()

    idp = world.opaque_idp
    idp.hold, idp.introspection_arrived = asyncio.Event(), asyncio.Event()
    try:
        calls = [
            asyncio.create_task(_call(world, "desk", token, {"trace": trace}))
            for _ in range(callers)
        ]
        # Every request is at the gateway while the one introspection is held.
        await asyncio.wait_for(all_sent.wait(), 10)
        await asyncio.wait_for(idp.introspection_arrived.wait(), 10)
        idp.hold.set()
        for answer in await asyncio.gather(*calls):
            _assert_answered(answer)
    finally:
        idp.hold.set()
        idp.hold = None
    assert _introspections(world) == before + 1
    # Within the cache window a call asks the IdP nothing.
    _assert_answered(await _call(world, "desk", token))
    assert _introspections(world) == before + 1


async def test_introspection_down_is_a_503_and_stalls_no_remembered_token(world: World) -> None:
    idp = world.opaque_idp
    remembered = _opaque(world)
    _assert_answered(await _call(world, "desk", remembered))
    idp.hold, idp.introspection_arrived = asyncio.Event(), asyncio.Event()
    try:
        # A new token's introspection hangs at the IdP...
        new = _opaque(world)
        waiting = asyncio.create_task(_call(world, "desk", new))
        await asyncio.wait_for(idp.introspection_arrived.wait(), 10)
        # ...and a remembered token's call does not wait for it.
        _assert_answered(await asyncio.wait_for(_call(world, "desk", remembered), 3))
        assert not waiting.done()
        # The IdP fails: the hung call and a new one are told to retry.
        idp.introspection_up = False
        idp.hold.set()
        idp.hold = None
        for answer in (await waiting, await _call(world, "desk", _opaque(world))):
            assert answer.status_code == 503, answer.text
            assert answer.headers["retry-after"].isdigit()
        _assert_answered(await _call(world, "desk", remembered))
    finally:
        if idp.hold is not None:
            idp.hold.set()
        idp.hold, idp.introspection_up = None, True
    # The failure was not remembered: once the IdP is back, the token is asked again.
    _assert_answered(await _call(world, "desk", new))


async def test_tokens_that_never_leave_the_gateway_spend_no_introspection_budget(
    world: World,
) -> None:
    # More than the burst (50) of distinct tokens no IdP could have issued: characters
    # outside RFC 6750's, or longer than 4 KiB. None may be sent, so none may spend
    # the budget that real opaque tokens need.
    before = _introspections(world)
    garbage = [f"not a token {i}!" for i in range(40)] + [
        secrets.token_urlsafe(3200) + str(i) for i in range(40)
    ]
    answers = await asyncio.gather(*(_call(world, "desk", t) for t in garbage))
    for answer in answers:
        _assert_refused(world, "desk", answer, "malformed")
    assert _introspections(world) == before
    _assert_answered(await _call(world, "desk", _opaque(world)))


async def test_no_token_or_client_secret_is_written_to_the_gateway_log(world: World) -> None:
    sent = [make(world) for make, _ in CRAFTED.values()]
    sent += [world.token(), _opaque(world), secrets.token_urlsafe(32)]
    for token in sent:
        await _call(world, "shop" if token.count(".") == 2 else "desk", token)
    log = world.gateway.log()
    assert "token_refused" in log
    for token in sent:
        # Any long part of it (an opaque token is one part) would give it away.
        assert max(token.split("."), key=len)[:40] not in log
    assert world.opaque_idp.client_secret not in log


async def test_a_refusal_before_the_body_is_read_says_the_connection_closes(
    world: World,
) -> None:
    """The 401 comes before the body is read (the token is checked first,
    docs/architecture.md, "Unfinished bodies"); the connection must then either be
    announced closed or stay usable, or a client's next request on it fails. Whether
    granian closes it is a race: many connections at once."""
    closed = await asyncio.gather(*(_refused_then_reused(world) for _ in range(CONNECTIONS)))
    assert not any(closed), f"{sum(closed)} of {CONNECTIONS} closed without Connection: close"


CONNECTIONS = 40


async def _refused_then_reused(world: World) -> bool:
    """Whether the connection of a refused request was closed unannounced."""
    token = CRAFTED["alg-none-unsigned"][0](world)
    body = json.dumps(rpc("tools/call", {"name": "hours", "arguments": {}, "_meta": META}))
    head = "".join(
        f"{name}: {value}\r\n"
        for name, value in {
            **modern(token, "tools/call", **{"Mcp-Name": "hours"}),
            "Host": f"127.0.0.1:{world.gateway.port}",
            "Content-Length": str(len(body)),
        }.items()
    )
    request = f"POST /mcp/v1/acme/shop HTTP/1.1\r\n{head}\r\n".encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", world.gateway.port)
    try:
        writer.write(request)  # the headers only: the answer comes before the body
        answer = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
        assert answer.startswith(b"HTTP/1.1 401 "), answer
        if b"\r\nconnection: close\r\n" in answer.lower():
            return False  # announced: a client opens a new connection
        length = next(
            int(line.split(b":", 1)[1])
            for line in answer.lower().split(b"\r\n")
            if line.startswith(b"content-length:")
        )
        await reader.readexactly(length)
        writer.write(body.encode())  # the rest of the first request, as a client sends it
        writer.write(request + body.encode())  # then the next one on the same connection
        try:
            second = await asyncio.wait_for(reader.read(12), 10)
        except ConnectionError:
            second = b""
        return not second.startswith(b"HTTP/1.1 ")
    finally:
        writer.close()
