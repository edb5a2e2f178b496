"""Any secret bound to any header, a query parameter or a basic-auth field, or
several of them at once (docs/operation-file.md, "Auth"), sent to a loopback upstream that echoes the
whole request back: the upstream gets the secret where the spec binds it, and
nothing Crank keeps (the redacted request, its repr, results, structured
errors and their details) shows any spelling of it."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest
from aiohttp import web

from shared.engine.compiler import CompiledOperation, compile_operation
from shared.engine.errors import ToolError
from shared.engine.masking import MASK
from shared.engine.outbound import UpstreamExecutor
from shared.engine.spec import operation_from_builtins
from shared.engine.spec_validation import validate_operation
from shared.engine.upstream import UpstreamCall
from tests.support.gateway import serve_upstream
from tests.support.masking import leaks
from tests.support.processes import free_port

KEY = 'qk/ey+a&b=c#d%"Q-ключ'  # every character a query string treats specially
USER = "svc-user"
PASSWORD = 'pw/two+x"Y-ß:colon'  # a colon is allowed in the password
SECRETS = {"KEY": KEY, "USER": USER, "PASSWORD": PASSWORD}
HIDDEN = [KEY, PASSWORD, f"{USER}:{PASSWORD}"]


async def echo(request: web.Request) -> web.Response:
    """Everything the request carried, as JSON; status from the path."""
    seen = {
        "url": str(request.url),
        "query": [[k, v] for k, v in request.query.items()],
        "headers": {k.lower(): v for k, v in request.headers.items()},  # names: any case
    }
    status = 200 if request.path == "/ok" else 500
    return web.Response(
        status=status, body=msgspec.json.encode(seen), content_type="application/json"
    )


@pytest.fixture
async def port() -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_get("/ok", echo)
    app.router.add_get("/fail", echo)
    async with serve_upstream(app) as serving:
        yield serving


def compiled(port: int, path: str, auth: Any, **request: Any) -> CompiledOperation:
    spec = operation_from_builtins(
        {
            "name": "get_echo",
            "description": "Gets an echo of the request.",
            "input": {"type": "object", "properties": {"q": {"type": "string"}}},
            "request": {
                "method": "GET",
                "url": f"http://127.0.0.1:{port}{path}",
                "auth": auth,
                **request,
            },
            "execution_config": {"timeout_ms": 2000, "retries": 0},
        }
    )
    assert validate_operation(spec) == []
    return compile_operation(spec)


async def received(
    operation: CompiledOperation, executor: UpstreamExecutor, arguments: dict[str, Any]
) -> dict[str, Any]:
    """What the upstream saw, read from the raw response (the result itself is masked)."""
    built = operation.build(arguments, SECRETS)
    upstream = UpstreamCall()
    selected = await operation.call(executor, built, upstream, egress=None)
    assert upstream.response is not None
    shown = msgspec.json.encode([selected.value, built.redacted(), repr(built)]).decode()
    assert leaks(shown, HIDDEN) == []
    assert MASK in shown
    seen: dict[str, Any] = msgspec.json.decode(upstream.response.body)
    return seen


QUERY = {"type": "query", "name": "api_key", "secret": "KEY"}


async def test_a_secret_bound_to_a_query_parameter_arrives_there(
    port: int, executor: UpstreamExecutor
) -> None:
    seen = await received(compiled(port, "/ok", QUERY), executor, {"q": "x"})
    assert seen["query"] == [["q", "x"], ["api_key", KEY]]
    assert "authorization" not in seen["headers"]


async def test_an_argument_of_the_same_name_cannot_replace_the_query_secret(
    port: int, executor: UpstreamExecutor
) -> None:
    # Undeclared arguments go to the query by default; never the auth's parameter.
    seen = await received(compiled(port, "/ok", QUERY), executor, {"api_key": "mine"})
    assert seen["query"] == [["api_key", KEY]]


async def test_a_secret_bound_to_any_header_arrives_there(
    port: int, executor: UpstreamExecutor
) -> None:
    auth = {"type": "header", "name": "X-Partner-Signature", "secret": "KEY"}
    seen = await received(compiled(port, "/ok", auth), executor, {})
    assert seen["headers"]["x-partner-signature"] == KEY


async def test_several_bindings_send_every_secret_at_once(
    port: int, executor: UpstreamExecutor
) -> None:
    auth = [
        {"type": "header", "name": "DD-API-KEY", "secret": "KEY"},
        {"type": "basic", "username": USER, "password": {"secret": "PASSWORD"}},
        QUERY,
    ]
    seen = await received(compiled(port, "/ok", auth), executor, {})
    assert seen["headers"]["dd-api-key"] == KEY
    token = seen["headers"]["authorization"].removeprefix("Basic ")
    assert base64.b64decode(token).decode() == f"{USER}:{PASSWORD}"
    assert seen["query"] == [["api_key", KEY]]


@pytest.mark.parametrize(
    ("username", "password", "sent"),
    [
        (USER, {"secret": "PASSWORD"}, f"{USER}:{PASSWORD}"),
        ({"secret": "USER"}, {"secret": "PASSWORD"}, f"{USER}:{PASSWORD}"),
        ({"secret": "KEY"}, None, f"{KEY}:"),  # an API key as the user, no password
    ],
)
async def test_basic_auth_fields_each_bind_a_literal_or_a_secret(
    port: int, executor: UpstreamExecutor, username: Any, password: Any, sent: str
) -> None:
    auth: dict[str, Any] = {"type": "basic", "username": username}
    if password is not None:
        auth["password"] = password
    seen = await received(compiled(port, "/ok", auth), executor, {})
    scheme, _, token = seen["headers"]["authorization"].partition(" ")
    assert (scheme, base64.b64decode(token).decode()) == ("Basic", sent)


@pytest.mark.parametrize(
    "auth",
    [
        QUERY,
        {"type": "header", "name": "X-Key", "secret": "KEY"},
        {"type": "basic", "username": USER, "password": {"secret": "PASSWORD"}},
    ],
)
async def test_an_upstream_error_echoing_the_request_leaks_nothing(
    port: int, executor: UpstreamExecutor, auth: dict[str, Any]
) -> None:
    operation = compiled(port, "/fail", auth)
    built = operation.build({}, SECRETS)
    with pytest.raises(ToolError) as raised:
        await operation.call(executor, built, UpstreamCall(), egress=None)
    error = raised.value
    assert error.error_code == "upstream_error"
    shown = msgspec.json.encode([error.to_structured(), error.details, str(error)]).decode()
    assert leaks(shown, HIDDEN) == []
    assert MASK in error.details["upstream_text"]  # the echo was there, masked


async def test_an_upstream_that_does_not_answer_leaks_nothing_of_the_url(
    executor: UpstreamExecutor,
) -> None:
    operation = compiled(free_port(), "/ok", QUERY)  # nothing listens there
    with pytest.raises(ToolError) as raised:
        await operation.call(executor, operation.build({}, SECRETS), UpstreamCall(), egress=None)
    shown = msgspec.json.encode([raised.value.to_structured(), raised.value.details]).decode()
    assert leaks(shown, HIDDEN) == []


@pytest.mark.parametrize(
    ("auth", "secrets", "missing"),
    [
        (QUERY, {}, "KEY"),
        (QUERY, {"KEY": "a\r\nb"}, "KEY"),
        ({"type": "basic", "username": {"secret": "USER"}}, {"USER": "a:b"}, "USER"),
        ({"type": "basic", "username": USER, "password": {"secret": "PASSWORD"}}, {}, "PASSWORD"),
    ],
)
def test_a_missing_or_unusable_secret_is_secret_missing(
    auth: dict[str, Any], secrets: dict[str, str], missing: str
) -> None:
    with pytest.raises(ToolError) as raised:
        compiled(1, "/ok", auth).build({}, secrets)
    assert raised.value.error_code == "secret_missing"
    assert raised.value.details == {"secret": missing}
