"""What an access token costs the gateway: a remembered token against a full check.

    .venv/bin/python bench/token_validation.py [--rounds 20000]

Issue 28 (performance): a call with a cached valid JWT may cost at most 5 % more
gateway CPU than the same call with an agent key, so the remembered path must
be a digest, a dict look-up and an expiry check. Prints microseconds per call,
in process, for RS256 (2048-bit) and ES256 tokens:

- ``cached``: ``AccessTokenValidator.authenticate`` of a token it has seen;
- ``full``: ``access_tokens.validate`` (header, key, signature, claims), what a
  first sight costs besides the key set;
- ``digest``: the SHA-256 alone, the floor of the cached path.

Figures only, no assertion; the machine is shared, so compare the rows of one run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from collections.abc import Callable

from joserfc.jwk import ECKey, Key, KeySet, RSAKey
from joserfc.jwt import encode

from shared.identity.access_tokens import validate
from shared.identity.issuers import TrustedIssuer
from shared.identity.jwks_cache import JwksCache
from shared.identity.key_sets import parse_jwks
from shared.identity.result_cache import token_digest
from shared.identity.validator import AccessTokenValidator

ISSUER = "https://idp.example/realms/acme"
AUDIENCE = "https://crank.example/mcp/v1/acme/sales"


def _per_call_us(rounds: int, call: Callable[[], object]) -> float:
    started = time.perf_counter()
    for _ in range(rounds):
        call()
    return (time.perf_counter() - started) / rounds * 1e6


async def _cached_us(rounds: int, validator: AccessTokenValidator, token: str) -> float:
    await validator.authenticate(token, AUDIENCE)
    started = time.perf_counter()
    for _ in range(rounds):
        await validator.authenticate(token, AUDIENCE)
    return (time.perf_counter() - started) / rounds * 1e6


async def main(rounds: int) -> None:
    keys: list[tuple[str, Key]] = [
        ("RS256", RSAKey.generate_key(2048, parameters={"kid": "rsa"}, private=True)),
        ("ES256", ECKey.generate_key("P-256", parameters={"kid": "ec"}, private=True)),
    ]
    document = KeySet([k for _, k in keys]).as_dict(private=False)
    body = json.dumps(document).encode()

    async def fetch(url: str) -> bytes:  # the bench measures validation, not HTTP
        return body

    issuer = TrustedIssuer(issuer=ISSUER, jwks_uri=f"{ISSUER}/jwks")
    validator = AccessTokenValidator([issuer], JwksCache(fetch))
    verification = parse_jwks(body)
    now = time.time()
    claims = {"iss": ISSUER, "sub": "user-42", "aud": AUDIENCE, "exp": int(now) + 3600}
    print(f"{'alg':6} {'cached µs':>10} {'full µs':>10} {'digest µs':>10}")
    for alg, key in keys:
        token = encode({"alg": alg, "typ": "at+jwt", "kid": key.kid}, claims, key, [alg])
        cached = await _cached_us(rounds, validator, token)
        full = _per_call_us(
            max(rounds // 20, 100), lambda t=token: validate(t, issuer, AUDIENCE, verification, now)
        )
        digest = _per_call_us(rounds, lambda t=token: token_digest(t, AUDIENCE))
        print(f"{alg:6} {cached:10.2f} {full:10.1f} {digest:10.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    asyncio.run(main(parser.parse_args().rounds))
