"""``CompiledOperation.call``, the one upstream step: what it returns, what it
raises (only ToolError) and what it measures, against a loopback upstream."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp import web

from shared.engine.compiler import CompiledOperation, compile_operation
from shared.engine.errors import ToolError
from shared.engine.masking import MASK
from shared.engine.outbound import UpstreamExecutor
from shared.engine.spec import operation_from_builtins
from shared.engine.upstream import UpstreamCall, UpstreamFailure
from tests.support.gateway import serve_upstream
from tests.support.processes import free_port

TOKEN = "tok/en+abc"


def compiled(port: int, path: str) -> CompiledOperation:
    spec: dict[str, Any] = {
        "name": "get_echo",
        "description": "Gets an echo. Use when testing the upstream step.",
        "input": {"type": "object", "properties": {}},
        "request": {
            "method": "GET",
            "url": f"http://127.0.0.1:{port}{path}",
            "auth": {"type": "bearer", "secret": "T"},
        },
        "execution_config": {"timeout_ms": 2000, "retries": 0},
    }
    return compile_operation(operation_from_builtins(spec))


async def echo(request: web.Request) -> web.Response:
    token = request.headers["Authorization"].removeprefix("Bearer ")
    return web.json_response({"got": token})


async def refuse(request: web.Request) -> web.Response:
    return web.Response(status=403, text=f"no entry for {TOKEN}")


@pytest.fixture
async def port() -> AsyncIterator[int]:
    app = web.Application()
    app.router.add_get("/echo", echo)
    app.router.add_get("/refuse", refuse)
    async with serve_upstream(app) as serving:
        yield serving


async def test_a_success_is_selected_masked_and_measured(
    port: int, executor: UpstreamExecutor
) -> None:
    operation = compiled(port, "/echo")
    upstream = UpstreamCall()
    selected = await operation.call(
        executor, operation.build({}, {"T": TOKEN}), upstream, egress=None
    )
    assert selected.value == {"got": MASK}
    assert (upstream.status, upstream.attempts) == (200, 1)
    assert upstream.response is not None
    assert upstream.elapsed_ms is not None


async def test_an_error_status_is_a_tool_error_with_the_measurements_in_its_details(
    port: int, executor: UpstreamExecutor
) -> None:
    operation = compiled(port, "/refuse")
    upstream = UpstreamCall()
    with pytest.raises(ToolError) as raised:
        await operation.call(executor, operation.build({}, {"T": TOKEN}), upstream, egress=None)
    assert raised.value.error_code == "upstream_auth_failed"
    assert not isinstance(raised.value, UpstreamFailure)  # the upstream answered
    assert raised.value.details == {
        "upstream_status": 403,
        "upstream_text": f"no entry for {MASK}",
        "attempts": 1,
    }
    assert (upstream.status, upstream.attempts) == (403, 1)


async def test_no_answer_is_an_upstream_failure_that_says_nothing_was_sent(
    executor: UpstreamExecutor,
) -> None:
    operation = compiled(free_port(), "/echo")  # nothing listens there
    upstream = UpstreamCall()
    with pytest.raises(UpstreamFailure) as raised:
        await operation.call(executor, operation.build({}, {"T": TOKEN}), upstream, egress=None)
    assert raised.value.error_code == "upstream_unavailable"
    assert raised.value.delivery == "not_sent"
    assert raised.value.details["attempts"] == upstream.attempts == 1
    assert upstream.status is None
    assert upstream.elapsed_ms is not None
