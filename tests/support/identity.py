"""Test identity provider parts: signing keys, tokens crafted byte by byte (also the
hostile ones a real IdP would never mint), and a loopback server publishing a JWKS
whose requests are counted."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

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
