"""Opaque access tokens by introspection (RFC 7662) against a loopback endpoint
over real HTTP: what an answer must hold, the bounded cache, one request for
concurrent calls, the budget, and the client secret kept out of logs."""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import pytest
from aiohttp import web
from joserfc.jwk import RSAKey
from structlog.testing import capture_logs

from shared.engine.outbound import UpstreamExecutor
from shared.engine.ssrf import AddressPolicy, parse_allowlist
from shared.identity.access_tokens import Principal
from shared.identity.fetching import executor_fetch, executor_post
from shared.identity.issuers import Introspection, IssuerConfigError, TrustedIssuer
from shared.identity.jwks_cache import JwksCache
from shared.identity.refusals import TokenRefused
from shared.identity.result_cache import ResultCache
from shared.identity.validator import AccessTokenValidator
from tests.support.gateway import serve_upstream
from tests.support.identity import AUDIENCE, NOW, OTHER_AUDIENCE, mint

CLIENT_ID = "crank-gateway"
CLIENT_SECRET = "intro-s3cret:with/odd+chars"


class Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@dataclass
class Endpoint:
    """An IdP's introspection endpoint: answers by token, checks the client's Basic auth."""

    answers: dict[str, dict[str, Any]] = field(default_factory=dict)
    requests: int = 0
    up: bool = True
    delay_s: float = 0.0
    port: int = 0

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.Response:
        self.requests += 1
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if not self.up:
            return web.Response(status=503)
        user, _, password = (
            base64.b64decode(request.headers["Authorization"].removeprefix("Basic "))
            .decode()
            .partition(":")
        )
        if (user, password) != (CLIENT_ID, "intro-s3cret%3Awith%2Fodd%2Bchars"):
            return web.Response(status=401)
        form = parse_qs(await request.text())
        assert form["token_type_hint"] == ["access_token"]
        answer = self.answers.get(form["token"][0], {"active": False})
        return web.json_response(answer)

    def active(self, token: str, **claims: Any) -> None:
        base = {
            "active": True,
            "iss": self.issuer,
            "sub": "user-7",
            "aud": AUDIENCE,
            "exp": int(NOW) + 3600,
            "client_id": "vscode",
            "username": "grace",
            "scope": "orders:read",
        }
        base.update(claims)
        self.answers[token] = {k: v for k, v in base.items() if v is not None}


@dataclass
class Setup:
    endpoint: Endpoint
    validator: AccessTokenValidator
    wall: Clock
    monotonic: Clock


@pytest.fixture
async def endpoint() -> AsyncIterator[Endpoint]:
    running = Endpoint()
    app = web.Application()
    app.router.add_post("/introspect", running.handle)
    async with serve_upstream(app) as port:
        running.port = port
        yield running


@pytest.fixture
async def executor(endpoint: Endpoint) -> AsyncIterator[UpstreamExecutor]:
    policy = AddressPolicy(allowlist=parse_allowlist([f"127.0.0.1:{endpoint.port}"]))
    async with UpstreamExecutor(policy) as running:
        yield running


def introspecting(endpoint: Endpoint) -> TrustedIssuer:
    return TrustedIssuer(
        issuer=endpoint.issuer,
        introspection=Introspection(
            endpoint=f"{endpoint.issuer}/introspect",
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
        ),
    )


@pytest.fixture
def setup(endpoint: Endpoint, executor: UpstreamExecutor) -> Setup:
    wall, monotonic = Clock(NOW), Clock(0.0)
    validator = AccessTokenValidator(
        [introspecting(endpoint)],
        JwksCache(executor_fetch(executor)),
        post=executor_post(executor, timeout_ms=2000),
        introspection_cache_s=60,
        introspection_rate=1,
        introspection_burst=5,
        clock=wall,
        monotonic=monotonic,
    )
    return Setup(endpoint, validator, wall, monotonic)


async def refused(setup: Setup, token: str, audience: str = AUDIENCE) -> str:
    with pytest.raises(TokenRefused) as caught:
        await setup.validator.authenticate(token, audience)
    return caught.value.reason


async def test_an_active_token_gives_its_principal_and_is_remembered(setup: Setup) -> None:
    setup.endpoint.active("opaque-1")
    principal = await setup.validator.authenticate("opaque-1", AUDIENCE)
    assert (principal.subject, principal.client_id, principal.display_name, principal.scopes) == (
        "user-7",
        "vscode",
        "grace",
        frozenset({"orders:read"}),
    )
    await setup.validator.authenticate("opaque-1", AUDIENCE)
    assert setup.endpoint.requests == 1


async def test_a_remembered_opaque_token_is_asked_again_after_the_cache_time(
    setup: Setup,
) -> None:
    setup.endpoint.active("opaque-1")
    await setup.validator.authenticate("opaque-1", AUDIENCE)
    del setup.endpoint.answers["opaque-1"]  # revoked at the IdP
    setup.wall.now += 59
    await setup.validator.authenticate("opaque-1", AUDIENCE)
    setup.wall.now += 1
    assert await refused(setup, "opaque-1") == "inactive"
    assert setup.endpoint.requests == 2


@pytest.mark.parametrize(
    ("claims", "reason"),
    [
        ({"aud": OTHER_AUDIENCE}, "wrong_audience"),
        ({"aud": None}, "missing_claim"),  # a token bound to no resource is refused
        ({"iss": "https://other-idp.example"}, "wrong_issuer"),
        ({"exp": int(NOW) - 60}, "expired"),
        ({"active": "true"}, "inactive"),  # only JSON true is active
        ({"sub": None}, "missing_claim"),
    ],
)
async def test_answers_that_are_refused(setup: Setup, claims: dict[str, Any], reason: str) -> None:
    setup.endpoint.active("opaque-1", **claims)
    assert await refused(setup, "opaque-1") == reason


async def test_an_answer_without_iss_and_exp_is_bound_by_the_cache_time(setup: Setup) -> None:
    setup.endpoint.active("opaque-1", iss=None, exp=None)
    principal = await setup.validator.authenticate("opaque-1", AUDIENCE)
    assert principal.expires_at == NOW + 60


async def test_an_inactive_token_is_refused_and_remembered_briefly(setup: Setup) -> None:
    assert await refused(setup, "unknown-token") == "inactive"
    assert await refused(setup, "unknown-token") == "inactive"
    assert setup.endpoint.requests == 1


async def test_a_token_of_no_bearer_shape_never_leaves_crank(setup: Setup) -> None:
    for token in ("has space", "ünïcode", "x" * 5000, "a=b", ""):
        assert await refused(setup, token) == "malformed"
    assert setup.endpoint.requests == 0


async def test_a_token_of_no_bearer_shape_spends_no_introspection_budget(setup: Setup) -> None:
    for i in range(10):  # twice the burst
        assert await refused(setup, f"no bearer token {i}") == "malformed"
    setup.endpoint.active("opaque-1")
    assert (await setup.validator.authenticate("opaque-1", AUDIENCE)).subject == "user-7"


async def test_concurrent_calls_with_one_token_share_one_request(setup: Setup) -> None:
    setup.endpoint.active("opaque-1")
    setup.endpoint.delay_s = 0.2
    principals = await asyncio.gather(
        *(setup.validator.authenticate("opaque-1", AUDIENCE) for _ in range(20))
    )
    assert {p.subject for p in principals} == {"user-7"}
    assert setup.endpoint.requests == 1


async def test_introspections_beyond_the_budget_are_refused_without_a_request(
    setup: Setup,
) -> None:
    for i in range(5):  # the burst
        assert await refused(setup, f"made-up-{i}") == "inactive"
    assert await refused(setup, "made-up-5") == "introspection_unavailable"
    assert setup.endpoint.requests == 5
    setup.monotonic.now += 1  # one more per second
    assert await refused(setup, "made-up-6") == "inactive"
    assert setup.endpoint.requests == 6


async def test_an_unreachable_endpoint_is_not_remembered_and_the_secret_never_logged(
    setup: Setup,
) -> None:
    setup.endpoint.active("opaque-1")
    setup.endpoint.up = False
    with capture_logs() as logs:
        with pytest.raises(TokenRefused) as caught:
            await setup.validator.authenticate("opaque-1", AUDIENCE)
        setup.endpoint.up = True
        assert (await setup.validator.authenticate("opaque-1", AUDIENCE)).subject == "user-7"
    assert caught.value.reason == "introspection_unavailable"
    assert CLIENT_SECRET not in str(caught.value)
    assert "s3cret" not in json.dumps(logs, default=str)
    assert "s3cret" not in repr(introspecting(setup.endpoint))


async def test_a_jwt_is_never_introspected(setup: Setup, rsa: RSAKey) -> None:
    # The issuer publishes no JWKS: a JWT cannot be checked, and is not sent away.
    token = mint(rsa, setup.endpoint.issuer)
    assert await refused(setup, token) == "keys_unavailable"
    assert setup.endpoint.requests == 0


async def no_fetch(url: str) -> bytes:
    raise AssertionError("no fetch expected")


def test_two_introspecting_issuers_for_one_agent_are_refused(endpoint: Endpoint) -> None:
    other = TrustedIssuer(
        issuer="https://idp.example",
        introspection=Introspection(
            endpoint="https://idp.example/introspect", client_id="c", client_secret="s"
        ),
    )
    with pytest.raises(IssuerConfigError, match=r"^introspection: at most one"):
        AccessTokenValidator([introspecting(endpoint), other], JwksCache(no_fetch), post=None)


def test_an_issuer_needs_keys_or_introspection() -> None:
    with pytest.raises(IssuerConfigError, match=r"^jwks_uri: required unless introspection"):
        TrustedIssuer(issuer="https://idp.example")


def test_a_remembered_result_is_capped_by_the_result_cache_too() -> None:
    # The introspection cache time never exceeds the result cache's own cap.
    results = ResultCache(accepted_cap_s=10)
    principal = Principal("https://idp", "s", None, None, (), frozenset(), NOW + 3600)
    results.accept(b"d" * 32, principal, NOW, cap_s=60)
    assert results.get(b"d" * 32, NOW + 10) is None
