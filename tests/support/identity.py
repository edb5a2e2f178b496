"""Test identity provider parts: signing keys, tokens crafted byte by byte (also the
hostile ones a real IdP would never mint), and a loopback server publishing a JWKS
whose requests are counted; a whole loopback identity provider (discovery, JWKS,
introspection) that a test controls."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

from aiohttp import web
from joserfc.jwk import ECKey, Key, KeySet, RSAKey
from joserfc.jws import JWSRegistry

from tests.support.gateway import serve_upstream

AUDIENCE = "https://crank.example/mcp/v1/acme/sales"
OTHER_AUDIENCE = "https://crank.example/mcp/v1/acme/support"
NOW = 1_800_000_000.0


def rsa_key(kid: str) -> RSAKey:
    return RSAKey.generate_key(2048, parameters={"kid": kid}, private=True)


def ec_key(kid: str) -> ECKey:
    return ECKey.generate_key("P-256", parameters={"kid": kid}, private=True)


def jwks(*keys: Key) -> bytes:
    """The public JWKS document of ``keys``."""
    return json.dumps(KeySet(list(keys)).as_dict(private=False)).encode()


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def sign(header: dict[str, Any], claims: dict[str, Any], key: Key | None, alg: str) -> str:
    """A compact JWS with exactly ``header``: signed with ``key`` by ``alg``."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    signature = (
        b"" if key is None else JWSRegistry.algorithms[alg].sign(signing_input.encode(), key)
    )
    return f"{signing_input}.{b64(signature)}"


def hmac_with_public_pem(header: dict[str, Any], claims: dict[str, Any], key: RSAKey) -> str:
    """The classic confusion attack: HS256 keyed with the RSA public key's PEM."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    secret = key.as_pem(private=False)
    mac = hmac.new(secret, signing_input.encode(), hashlib.sha256).digest()
    return f"{signing_input}.{b64(mac)}"


def claims(issuer: str, **extra: Any) -> dict[str, Any]:
    """Valid claims for ``AUDIENCE`` at ``NOW``; ``extra`` overrides (None drops a claim)."""
    base: dict[str, Any] = {
        "iss": issuer,
        "sub": "user-42",
        "aud": AUDIENCE,
        "exp": int(NOW) + 600,
        "iat": int(NOW) - 10,
        "client_id": "claude-desktop",
        "scope": "orders:read orders:write",
    }
    base.update(extra)
    return {k: v for k, v in base.items() if v is not None}


def mint(key: Key, issuer: str, *, alg: str = "RS256", typ: str = "at+jwt", **extra: Any) -> str:
    return sign({"alg": alg, "typ": typ, "kid": key.kid}, claims(issuer, **extra), key, alg)


@dataclass
class JwksServer:
    """A loopback IdP's JWKS endpoint: what it serves, whether it is up, and how
    many requests it answered. ``delay_s`` slows each answer (concurrent misses)."""

    document: bytes
    up: bool = True
    delay_s: float = 0.0
    requests: int = 0
    port: int = 0
    paths: dict[str, bytes] = field(default_factory=dict)  # other documents by path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/jwks"

    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if not self.up:
            return web.Response(status=503)
        if request.path == "/jwks":
            return web.Response(body=self.document, content_type="application/json")
        if request.path in self.paths:
            return web.Response(body=self.paths[request.path], content_type="application/json")
        return web.Response(status=404)


@asynccontextmanager
async def serve_jwks(document: bytes) -> AsyncIterator[JwksServer]:
    server = JwksServer(document)
    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", server.handle)
    async with serve_upstream(app) as port:
        server.port = port
        yield server


@dataclass
class LoopbackIdP:
    """An identity provider on 127.0.0.1 that a test controls fully: OpenID discovery,
    a JWKS of the test's ``keys``, and an RFC 7662 introspection endpoint that checks
    HTTP Basic credentials and answers from ``opaque`` (a token's answer; any other
    token is inactive). Every request is counted by path.

    ``introspection_up`` False: the endpoint answers 503. ``hold``: while not set,
    introspection answers wait for it (``introspection_arrived`` is set when one
    is waiting), so a test can keep one in flight."""

    keys: list[Key]
    client_id: str = "crank-gateway"
    client_secret: str = "s3cret:with/odd&chars"  # form-encoded before Basic (RFC 6749 2.3.1)
    opaque: dict[str, dict[str, Any]] = field(default_factory=dict)
    introspection_up: bool = True
    hold: asyncio.Event | None = None
    introspection_arrived: asyncio.Event = field(default_factory=asyncio.Event)
    requests: Counter[str] = field(default_factory=Counter)
    bad_credentials: int = 0
    port: int = 0

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metadata(self) -> dict[str, str]:
        return {
            "issuer": self.issuer,
            "jwks_uri": f"{self.issuer}/jwks",
            "introspection_endpoint": f"{self.issuer}/introspect",
        }

    async def _discovery(self, request: web.Request) -> web.Response:
        self.requests[request.path] += 1
        return web.json_response(self.metadata())

    async def _jwks(self, request: web.Request) -> web.Response:
        self.requests[request.path] += 1
        return web.Response(body=jwks(*self.keys), content_type="application/json")

    async def _introspect(self, request: web.Request) -> web.Response:
        self.requests[request.path] += 1
        if request.headers.get("Authorization") != self.basic_credentials():
            self.bad_credentials += 1
            return web.json_response({"error": "invalid_client"}, status=401)
        form = await request.post()
        token = form.get("token")
        if self.hold is not None:
            self.introspection_arrived.set()
            await self.hold.wait()
        if not self.introspection_up:
            return web.Response(status=503)
        answer = self.opaque.get(token) if isinstance(token, str) else None
        return web.json_response(answer if answer is not None else {"active": False})

    def basic_credentials(self) -> str:
        pair = f"{quote(self.client_id, safe='')}:{quote(self.client_secret, safe='')}"
        return "Basic " + base64.b64encode(pair.encode()).decode()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/.well-known/openid-configuration", self._discovery)
        app.router.add_get("/jwks", self._jwks)
        app.router.add_post("/introspect", self._introspect)
        return app


@asynccontextmanager
async def serve_idp(*keys: Key) -> AsyncIterator[LoopbackIdP]:
    """A ``LoopbackIdP`` publishing ``keys`` (public parts only), for the block."""
    idp = LoopbackIdP(list(keys))
    async with serve_upstream(idp.app()) as port:
        idp.port = port
        yield idp
