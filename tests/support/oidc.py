"""A real OpenID provider for the identity tests, and a client that signs in at it over HTTP.

``openid_provider()`` starts tests/js/oidc_provider.mjs (the npm package ``oidc-provider``,
pinned in tests/js/package.json) on a free loopback port with its own signing keys, and
stops it by its process id. ``OpenIDProvider.sign_in()`` does what a browser and an MCP
client do together: register a public client, run authorization code + PKCE (S256) with
``resource`` and ``scope``, post the provider's development login and consent forms, catch
the redirect to the client's redirect URI and exchange the code. ``user()`` is the browser
part alone, as the handlers of the MCP SDK's ``OAuthClientProvider`` (``MemoryTokenStorage``
is its storage). ``restart()`` swaps the signing key (the old one gone, or still published
beside the new one until ``retire_old_keys()``), as an identity provider's key rotation
does. The provider keeps its state in memory, so a restart also forgets registered
clients and refresh tokens.

Signing keys are generated here, with ``cryptography``: RS256 (RSA 2048) or ES256 (P-256),
written as a private JWKS the provider loads from a file.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import secrets
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx2
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthToken

from tests.support.js import NODE, require_node22
from tests.support.paths import JS_DIR
from tests.support.processes import free_port

Alg = Literal["RS256", "ES256"]
# The registered redirect URI: nothing listens there, the client stops at the redirect.
REDIRECT_URI = "http://127.0.0.1:1/callback"
START_TIMEOUT_S = 15


def _b64url(value: bytes) -> str:
    return base64.urlsafe_b64encode(value).rstrip(b"=").decode()


def _int_b64url(value: int, size: int | None = None) -> str:
    return _b64url(value.to_bytes(size or (value.bit_length() + 7) // 8, "big"))


def private_jwk(alg: Alg) -> dict[str, str]:
    """A fresh private signing key as a JWK, its kid the RFC 7638 thumbprint."""
    jwk: dict[str, str]
    if alg == "RS256":
        rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        private = rsa_key.private_numbers()
        public = private.public_numbers
        jwk = {"kty": "RSA", "e": _int_b64url(public.e), "n": _int_b64url(public.n)}
        jwk |= {
            "d": _int_b64url(private.d),
            "p": _int_b64url(private.p),
            "q": _int_b64url(private.q),
            "dp": _int_b64url(private.dmp1),
            "dq": _int_b64url(private.dmq1),
            "qi": _int_b64url(private.iqmp),
        }
        required: tuple[str, ...] = ("e", "kty", "n")
    else:
        ec_key = ec.generate_private_key(ec.SECP256R1())
        numbers = ec_key.private_numbers()
        jwk = {
            "crv": "P-256",
            "kty": "EC",
            "x": _int_b64url(numbers.public_numbers.x, 32),
            "y": _int_b64url(numbers.public_numbers.y, 32),
            "d": _int_b64url(numbers.private_value, 32),
        }
        required = ("crv", "kty", "x", "y")
    canonical = json.dumps({k: jwk[k] for k in required}, separators=(",", ":"))
    kid = _b64url(hashlib.sha256(canonical.encode()).digest())
    return jwk | {"kid": kid, "alg": alg, "use": "sig"}


def jwt_parts(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(header, payload) of a compact JWS, decoded without checking the signature."""
    header, payload, _signature = token.split(".")

    def decode(segment: str) -> dict[str, Any]:
        value = json.loads(base64.urlsafe_b64decode(segment + "=" * (-len(segment) % 4)))
        assert isinstance(value, dict)
        return value

    return decode(header), decode(payload)


@dataclass(frozen=True)
class Tokens:
    """What the token endpoint answered."""

    access_token: str
    refresh_token: str | None
    id_token: str | None
    expires_in: int
    scope: str

    @classmethod
    def from_response(cls, body: dict[str, Any]) -> Tokens:
        return cls(
            access_token=body["access_token"],
            refresh_token=body.get("refresh_token"),
            id_token=body.get("id_token"),
            expires_in=int(body["expires_in"]),
            scope=body.get("scope", ""),
        )


@dataclass(frozen=True)
class Client:
    """A public client registered at the provider (dynamic registration)."""

    client_id: str
    redirect_uri: str


class OpenIDProvider:
    """One oidc-provider process; use ``openid_provider()`` to start and stop it."""

    def __init__(
        self,
        workdir: Path,
        *,
        alg: Alg,
        scopes: str,
        accounts: dict[str, dict[str, Any]],
        access_token_ttl_s: int,
    ) -> None:
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.alg = alg
        self._jwks_path = workdir / "jwks.json"
        self._log_path = workdir / "oidc-provider.log"
        self._arguments = [
            "--port",
            str(self.port),
            "--jwks",
            str(self._jwks_path),
            "--scopes",
            scopes,
            "--accounts",
            json.dumps(accounts),
            "--access-token-ttl",
            str(access_token_ttl_s),
        ]
        self._keys = [private_jwk(alg)]
        self._process: asyncio.subprocess.Process | None = None
        self.started_in_s = 0.0

    @property
    def signing_kid(self) -> str:
        """The kid of the key new tokens are signed with."""
        return self._keys[0]["kid"]

    async def start(self) -> None:
        began = time.monotonic()
        self._jwks_path.write_text(json.dumps({"keys": self._keys}))
        self._jwks_path.chmod(0o600)
        with self._log_path.open("ab") as log:
            self._process = await asyncio.create_subprocess_exec(
                str(NODE),
                "oidc_provider.mjs",
                *self._arguments,
                cwd=JS_DIR,
                stdout=asyncio.subprocess.PIPE,
                stderr=log,
            )
        assert self._process.stdout is not None
        try:
            line = await asyncio.wait_for(self._process.stdout.readline(), START_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if line.decode().strip() != f"ready {self.issuer}":
            await self.stop()
            raise AssertionError(
                f"oidc-provider did not start: {line!r}\n{self._log_path.read_text()}"
            )
        self.started_in_s = time.monotonic() - began

    async def stop(self) -> None:
        """SIGTERM to this process (by its pid), SIGKILL if it lingers."""
        process, self._process = self._process, None
        if process is None or process.returncode is not None:
            return
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()

    async def restart(self, *, new_keys: bool = True, keep_old_keys: bool = False) -> None:
        """Same port and issuer; with ``new_keys`` new tokens are signed with a new key.

        ``keep_old_keys`` still publishes the previous keys after the new one (a rotation
        with overlap); without it they are gone from the JWKS (a hard rotation).
        """
        await self.stop()
        if new_keys:
            self._keys = [private_jwk(self.alg)] + (self._keys if keep_old_keys else [])
        await self.start()

    async def retire_old_keys(self) -> None:
        """Same port, issuer and signing key; the previous keys are no longer published
        (the end of a rotation's overlap)."""
        await self.stop()
        self._keys = self._keys[:1]
        await self.start()

    def http(self) -> httpx2.AsyncClient:
        """A client for the provider that keeps cookies and does not follow redirects."""
        return httpx2.AsyncClient(base_url=self.issuer, timeout=10, follow_redirects=False)

    async def discovery(self) -> dict[str, Any]:
        async with self.http() as http:
            response = await http.get("/.well-known/openid-configuration")
        response.raise_for_status()
        document: dict[str, Any] = response.json()
        return document

    async def jwks(self) -> dict[str, Any]:
        """The public keys, as a resource server fetches them."""
        async with self.http() as http:
            response = await http.get((await self.discovery())["jwks_uri"])
        response.raise_for_status()
        document: dict[str, Any] = response.json()
        return document

    async def register_client(self, redirect_uri: str = REDIRECT_URI) -> Client:
        """Dynamic registration of a public client, as the MCP SDK's OAuthClientProvider does."""
        async with self.http() as http:
            response = await http.post(
                (await self.discovery())["registration_endpoint"],
                # The metadata the MCP SDK's OAuthClientProvider sends (a native app).
                json={
                    "client_name": "crank-test-client",
                    "application_type": "native",
                    "redirect_uris": [redirect_uri],
                    "grant_types": ["authorization_code", "refresh_token"],
                    "response_types": ["code"],
                    "token_endpoint_auth_method": "none",
                },
            )
        assert response.status_code == 201, response.text
        return Client(client_id=response.json()["client_id"], redirect_uri=redirect_uri)

    async def sign_in(
        self,
        login: str,
        *,
        resource: str,
        scope: str = "openid offline_access",
        client: Client | None = None,
    ) -> Tokens:
        """Authorization code + PKCE (S256) for ``resource``, signed in as ``login``."""
        client = client or await self.register_client()
        metadata = await self.discovery()
        verifier = secrets.token_urlsafe(48)
        challenge = _b64url(hashlib.sha256(verifier.encode()).digest())
        state = secrets.token_urlsafe(16)
        query = urlencode(
            {
                "response_type": "code",
                "client_id": client.client_id,
                "redirect_uri": client.redirect_uri,
                "scope": scope,
                "resource": resource,
                "state": state,
                "code_challenge": challenge,
                "code_challenge_method": "S256",
            }
        )
        user = self.user(login)
        await user.redirect_handler(f"{metadata['authorization_endpoint']}?{query}")
        answer = await user.callback_handler()
        assert answer.state == state, answer
        assert answer.iss == self.issuer, f"RFC 9207 iss missing or wrong: {answer}"
        return await self._token(
            {
                "grant_type": "authorization_code",
                "code": answer.code,
                "redirect_uri": client.redirect_uri,
                "code_verifier": verifier,
                "client_id": client.client_id,
                "resource": resource,
            }
        )

    def user(self, login: str) -> HeadlessUser:
        """A person who signs in as ``login``; hand its handlers to the MCP SDK's
        ``OAuthClientProvider(redirect_handler=..., callback_handler=...)``."""
        return HeadlessUser(self.issuer, login)

    async def refresh(
        self, refresh_token: str, client_id: str, *, resource: str | None = None
    ) -> Tokens:
        """The refresh_token grant; without ``resource`` the granted one is used."""
        form = {
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": client_id,
        }
        if resource is not None:
            form["resource"] = resource
        return await self._token(form)

    async def _token(self, form: dict[str, str]) -> Tokens:
        async with self.http() as http:
            response = await http.post((await self.discovery())["token_endpoint"], data=form)
        assert response.status_code == 200, response.text
        return Tokens.from_response(response.json())


class HeadlessUser:
    """Plays the browser: opens the authorization URL, posts the provider's login and
    consent forms (keeping its cookies), and stops at the first redirect that leaves the
    provider, the client's redirect URI, whose query it hands back as the callback."""

    def __init__(self, issuer: str, login: str) -> None:
        self.issuer = issuer
        self.login = login
        self.callback_url: str | None = None

    async def redirect_handler(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient(timeout=10, follow_redirects=False) as http:
            response = await http.get(authorization_url)
            for _ in range(12):
                if response.is_redirect:
                    location = urljoin(str(response.url), response.headers["location"])
                    if not location.startswith(f"{self.issuer}/"):
                        self.callback_url = location
                        return
                    response = await http.get(location)
                    continue
                assert response.status_code == 200, f"{response.status_code}: {response.text}"
                response = await http.post(str(response.url), data=self._form(response))
        raise AssertionError("the sign-in never left the provider")

    async def callback_handler(self) -> AuthorizationCodeResult:
        assert self.callback_url is not None, "redirect_handler did not reach the client"
        query = parse_qs(urlsplit(self.callback_url).query)
        assert "code" in query, f"no code in the redirect: {self.callback_url}"
        return AuthorizationCodeResult(
            code=query["code"][0],
            state=query.get("state", [None])[0],
            iss=query.get("iss", [None])[0],
        )

    def _form(self, page: httpx2.Response) -> dict[str, str]:
        """What the person types into the devInteractions page shown."""
        if 'name="prompt" value="login"' in page.text:
            return {"prompt": "login", "login": self.login, "password": "any"}
        if 'name="prompt" value="consent"' in page.text:
            return {"prompt": "consent"}
        raise AssertionError(f"unexpected page at {page.url}:\n{page.text}")


class MemoryTokenStorage:
    """The MCP SDK's ``TokenStorage``, in memory: one client's registration and tokens."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


@asynccontextmanager
async def openid_provider(
    workdir: Path,
    *,
    alg: Alg = "RS256",
    scopes: str = "crank:read crank:write",
    accounts: dict[str, dict[str, Any]] | None = None,
    access_token_ttl_s: int = 600,
) -> AsyncIterator[OpenIDProvider]:
    """A running provider for the block; skips the caller when Node 22 cannot be installed.

    ``scopes`` are what its resource servers (any http://127.0.0.1 URL) may grant;
    ``accounts`` maps a login name to its ``name``, ``email`` and ``groups`` claims (a
    name not listed signs in too, with claims derived from it).
    """
    require_node22()
    provider = OpenIDProvider(
        workdir,
        alg=alg,
        scopes=scopes,
        accounts=accounts or {},
        access_token_ttl_s=access_token_ttl_s,
    )
    await provider.start()
    try:
        yield provider
    finally:
        with suppress(ProcessLookupError):
            await provider.stop()
