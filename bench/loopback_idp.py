"""A tiny OpenID provider on loopback for the token benches: the issuer's
metadata and JWKS for a key made at start, and RFC 9068 access tokens signed
with it.

No Node, no login flow: the benches need only what the gateway fetches (the
OpenID metadata, then its ``jwks_uri``) and a token to send. It serves from a
daemon thread of the bench's own process (stdlib ``http.server``), so it runs
beside any bench, async or not, and counts the documents it served: after the
warm-up a cached token must fetch nothing more (docs/performance.md, "Token
calls").
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType

from joserfc.jwk import KeySet, RSAKey
from joserfc.jwt import encode

PROVIDER = "bench-idp"  # the workspace's name for it (identity_providers[].name)
SCOPES = ("rates:read",)  # the agent's auth.scopes: every token must hold them
SUBJECT = "bench-user"
CLIENT_ID = "bench-client"
TOKEN_TTL_S = 3600


class LoopbackIdp:
    """``with LoopbackIdp() as idp``: ``idp.issuer`` serves its metadata and keys;
    ``idp.token(audience)`` mints an access token for ``audience``."""

    def __init__(self) -> None:
        self._key = RSAKey.generate_key(2048, parameters={"kid": "bench-1"}, private=True)
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self.issuer = f"http://127.0.0.1:{self.port}"
        self.served: dict[str, int] = {}  # path -> answers, for the no-fetch-per-call check
        self._documents = {
            "/.well-known/openid-configuration": json.dumps(
                {
                    "issuer": self.issuer,
                    "jwks_uri": f"{self.issuer}/jwks",
                    "response_types_supported": ["code"],
                    "subject_types_supported": ["public"],
                    "id_token_signing_alg_values_supported": ["RS256"],
                }
            ).encode(),
            "/jwks": json.dumps(KeySet([self._key]).as_dict(private=False)).encode(),
        }
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> LoopbackIdp:
        self._thread.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._server.shutdown()
        self._server.server_close()

    def token(self, audience: str) -> str:
        """An RFC 9068 access token for ``audience`` (an agent's canonical URL),
        holding the agent's scopes, valid an hour."""
        now = int(time.time())
        claims = {
            "iss": self.issuer,
            "sub": SUBJECT,
            "aud": audience,
            "client_id": CLIENT_ID,
            "scope": " ".join(SCOPES),
            "iat": now,
            "exp": now + TOKEN_TTL_S,
            "jti": f"bench-{now}",
        }
        header = {"alg": "RS256", "typ": "at+jwt", "kid": self._key.kid}
        return encode(header, claims, self._key, ["RS256"])

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        idp = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = idp._documents.get(self.path)
                idp.served[self.path] = idp.served.get(self.path, 0) + 1
                self.send_response(200 if body is not None else 404)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, format: str, *args: object) -> None:
                pass  # quiet: the bench prints what it measures

        return Handler
