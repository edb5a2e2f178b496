"""Hostile upstream answers at the engine's decisions (docs/security.md, "Upstream answers"):
the raw limit, the JSON node budget, deep nesting, text answers, and no proxy.

The gateway process under such answers (RSS, a concurrent /healthz) is
tests/gateway/pipeline/test_hostile_upstream.py.
"""

from __future__ import annotations

import dataclasses
import tracemalloc
from contextlib import AbstractAsyncContextManager
from typing import Any

import msgspec
import pytest
from aiohttp import web

from shared.engine.answer_limits import (
    DEFAULT_MAX_JSON_NODES,
    RAW_FLOOR,
    json_node_bound,
    raw_body_limit,
)
from shared.engine.errors import ToolError
from shared.engine.masking import masker_for
from shared.engine.outbound import (
    ExecutorConfig,
    UpstreamBlocked,
    UpstreamExecutor,
    UpstreamRequest,
    UpstreamResponseTooLarge,
)
from shared.engine.response_selector import ResponseSelector
from shared.engine.spec import OperationSpec, ResponseSpec
from shared.engine.spec_validation import validate_operation
from shared.engine.ssrf import AddressPolicy, parse_allowlist
from shared.settings import SettingsError, load_settings
from tests.support.gateway import serve_upstream

SECRET = "s3cr3t-hostile-token-7f2c"


def serving(handler: Any) -> AbstractAsyncContextManager[int]:
    """``handler`` for every path on a free loopback port; yields the port."""
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return serve_upstream(app)


def executor(port: int, config: ExecutorConfig | None = None) -> UpstreamExecutor:
    """An executor that may connect to 127.0.0.1:``port`` only."""
    allowlist = parse_allowlist([f"127.0.0.1:{port}"])
    return UpstreamExecutor(AddressPolicy(allowlist=allowlist), config)


# -- no proxy -------------------------------------------------------------------------


def test_the_executor_takes_no_proxy() -> None:
    assert "proxy" not in {f.name for f in dataclasses.fields(ExecutorConfig)}
    with pytest.raises(TypeError):
        ExecutorConfig(proxy="http://127.0.0.1:3128")  # type: ignore[call-arg]


async def test_an_environment_proxy_cannot_carry_a_refused_target(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Through a proxy the guard would judge the proxy's (allowed) address; the
    target's own address is judged, and the proxy is never asked."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(f"{request.host}{request.path}")
        return web.Response(text="reached")

    async with serving(record) as proxy, serving(record) as target:
        for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY"):
            monkeypatch.setenv(name, f"http://127.0.0.1:{proxy}")
        for name in ("NO_PROXY", "no_proxy"):
            monkeypatch.delenv(name, raising=False)
        request = UpstreamRequest(method="GET", url=f"http://127.0.0.1:{target}/x")
        async with executor(proxy) as ex:  # only the proxy is allowed
            with pytest.raises(UpstreamBlocked):
                await ex.execute(request)
    assert seen == []


# -- the raw limit --------------------------------------------------------------------


def test_the_raw_limit_follows_the_result_limit_unless_the_operation_says() -> None:
    assert raw_body_limit(ResponseSpec()) == RAW_FLOOR  # 16 x 64 KiB = 1 MiB
    assert raw_body_limit(ResponseSpec(max_bytes=1024)) == RAW_FLOOR
    assert raw_body_limit(ResponseSpec(max_bytes=1024 * 1024)) == 16 * 1024 * 1024
    assert raw_body_limit(ResponseSpec(max_raw_bytes=5000)) == 5000


async def test_an_operations_raw_limit_is_capped_by_the_executors_ceiling() -> None:
    async def big(request: web.Request) -> web.Response:
        return web.Response(body=b"x" * 6000)

    def get(port: int, limit: int | None) -> UpstreamRequest:
        url = f"http://127.0.0.1:{port}/"
        return UpstreamRequest(method="GET", url=url, retries=0, max_response_bytes=limit)

    async with serving(big) as port:
        async with executor(port, config=ExecutorConfig(max_response_bytes=8000)) as ex:
            assert len((await ex.execute(get(port, None))).body) == 6000
            assert len((await ex.execute(get(port, 6000))).body) == 6000
            with pytest.raises(UpstreamResponseTooLarge):
                await ex.execute(get(port, 5999))
        async with executor(port, config=ExecutorConfig(max_response_bytes=5000)) as ex:
            with pytest.raises(UpstreamResponseTooLarge):
                await ex.execute(get(port, 1_000_000))  # the ceiling wins


@pytest.mark.parametrize(("value", "valid"), [(1023, False), (1024, True), (10**9, False)])
def test_max_raw_bytes_is_validated(value: int, valid: bool) -> None:
    spec = msgspec.convert(
        {
            "name": "op",
            "description": "Gets a thing. Use when a test asks.",
            "input": {"type": "object"},
            "request": {"method": "GET", "url": "https://api.example.com/items"},
            "response": {"max_raw_bytes": value},
        },
        OperationSpec,
    )
    fields = {error.field for error in validate_operation(spec)}
    assert ("response.max_raw_bytes" not in fields) is valid


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("CRANK_UPSTREAM_MAX_RESPONSE_BYTES", "100"),
        ("CRANK_UPSTREAM_MAX_RESPONSE_BYTES", "1000000000"),
        ("CRANK_UPSTREAM_MAX_JSON_NODES", "10"),
        ("CRANK_UPSTREAM_MAX_JSON_NODES", "many"),
    ],
)
def test_the_answer_settings_are_validated(name: str, value: str) -> None:
    with pytest.raises(SettingsError, match=name):
        load_settings({name: value})


def test_the_answer_settings_reach_the_executor() -> None:
    settings = load_settings(
        {"CRANK_UPSTREAM_MAX_RESPONSE_BYTES": "2048", "CRANK_UPSTREAM_MAX_JSON_NODES": "5000"}
    )
    config = ExecutorConfig.from_settings(settings)
    assert (config.max_response_bytes, config.max_json_nodes) == (2048, 5000)
    defaults = ExecutorConfig.from_settings(load_settings({}))
    assert (defaults.max_response_bytes, defaults.max_json_nodes) == (
        10 * 1024 * 1024,
        DEFAULT_MAX_JSON_NODES,
    )


# -- the node budget ------------------------------------------------------------------


def _nodes(value: Any) -> int:
    """Values and keys, counted by walking the decoded value."""
    if isinstance(value, list):
        return 1 + sum(_nodes(item) for item in value)
    if isinstance(value, dict):
        return 1 + sum(1 + _nodes(item) for item in value.values())
    return 1


@pytest.mark.parametrize(
    "body",
    [
        b"[]",
        b"{}",
        b'  \n[{},{"a":[1,2,{"b":null}]},"x,y:[{"]',
        b'{"a":{"b":{"c":[true,false,1.5e3,"\\"],"]}}}',
        b"[" + b",".join([b'{"id":1,"tags":["a","b"]}'] * 100) + b"]",
    ],
)
def test_the_node_bound_never_counts_fewer_than_the_decoded_value_has(body: bytes) -> None:
    assert json_node_bound(body) >= _nodes(msgspec.json.decode(body))


@pytest.mark.parametrize("body", [b'"a,b:c[d{e"', b"12345", b"  true", b"not json, at all: [{"])
def test_a_scalar_or_text_counts_as_one_value(body: bytes) -> None:
    assert json_node_bound(body) == 1


def test_an_answer_over_the_node_budget_is_refused_before_it_is_decoded() -> None:
    body = b"[" + b"{}," * 999_999 + b"{}]"  # 3 MB, a million dicts (some 70 MB decoded)
    selector = ResponseSelector(select=None, max_items=50, max_bytes=65536)
    tracemalloc.start()
    try:
        with pytest.raises(ToolError) as caught:
            selector.select(200, {}, body, masker=masker_for((SECRET,)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.error_code == "upstream_response_too_large"
    assert (
        caught.value.details["reason"] == f"more than {DEFAULT_MAX_JSON_NODES} JSON values and keys"
    )
    assert peak < 1024 * 1024, peak


def test_an_answer_within_the_node_budget_is_selected() -> None:
    body = msgspec.json.encode([{"id": i, "note": SECRET} for i in range(1000)])
    selector = ResponseSelector(select=None, max_items=5, max_bytes=65536)
    selected = selector.select(200, {}, body, masker=masker_for((SECRET,)), max_nodes=5001)
    assert selected.value == [{"id": i, "note": "****"} for i in range(5)]
    assert selected.truncated
    with pytest.raises(ToolError, match="too large"):
        selector.select(200, {}, body, masker=masker_for((SECRET,)), max_nodes=4999)


@pytest.mark.parametrize("depth", [2_000, 100_000])
def test_nesting_deeper_than_the_decoder_goes_is_an_invalid_answer(depth: int) -> None:
    body = b"[" * depth + b"]" * depth
    selector = ResponseSelector(select=None, max_items=50, max_bytes=65536)
    with pytest.raises(ToolError) as caught:
        selector.select(200, {}, body, masker=masker_for((SECRET,)))
    assert caught.value.error_code == "upstream_response_invalid"


# -- text answers ---------------------------------------------------------------------


def test_a_large_text_answer_is_masked_and_cut_without_masking_all_of_it() -> None:
    """Only the head that can fit is masked: a secret straddling the cut leaves nothing."""
    head = "a" * (1000 - 5)
    body = (head + SECRET + "b" * 5_000_000).encode()
    selector = ResponseSelector(select=None, max_items=50, max_bytes=1024)
    tracemalloc.start()
    try:
        selected = selector.select(200, {}, body, masker=masker_for((SECRET,)))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    text = selected.value["text"]
    assert selected.truncated
    assert len(msgspec.json.encode(selected.value)) <= 1024
    assert text.startswith(head)
    assert SECRET[:3] not in text[len(head) :]
    assert peak < 1024 * 1024, peak
