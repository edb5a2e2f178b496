"""The demo's tools called: offline frankfurter, and the demo sales API through a gateway.

Offline, the demo's real frankfurter operation must fail as a structured
``upstream_unavailable``, not crash. That is proven in-process, so that no
test ever resolves or dials api.frankfurter.dev: the operation as the demo
seed stores it, compiled by shared.engine.compiler and executed by the gateway's
UpstreamExecutor whose resolver fails as an offline resolver does, and whose
connect check records any address it is asked for and lets nothing be dialled.

The sales GET operations run end to end: the demo sales API on a free
loopback port, the demo seeded as ``crank seed-demo`` seeds it (its sales
URLs on that port), a gateway allowlisting exactly that port (as ``crank up``
does), the demo's sales agent key. The approval and DELETE operations of the
sales agent are called in tests/gateway/approvals/test_endpoints.py and
tests/gateway/pipeline/test_confirmation.py.
"""

from __future__ import annotations

import errno
import socket
from pathlib import Path

import httpx
import pytest

from control_plane.demo import load_demo_file
from shared.engine.compiler import compile_operation
from shared.engine.errors import ToolError
from shared.engine.outbound import UpstreamExecutor
from shared.engine.spec import operation_from_builtins, spec_to_builtins
from shared.engine.ssrf import AddressPolicy
from shared.engine.upstream import UpstreamCall
from tests.support.gateway import demo_gateway
from tests.support.tool_calls import ERAS, Caller, assert_tool_error

FRANKFURTER_HOST = "api.frankfurter.dev"


class OfflineResolver:
    """Fails every lookup with ``failure``; ``answer`` instead returns that
    address (a name still in some cache while the network is down)."""

    def __init__(self, failure: OSError | None, answer: str | None = None) -> None:
        self.failure, self.answer = failure, answer
        self.asked: list[str] = []

    async def resolve(self, host: str, port: int) -> list[str]:
        self.asked.append(host)
        if self.failure is not None:
            raise self.failure
        assert self.answer is not None
        return [self.answer]


class NoNetwork:
    """A connect check without a network: records the address, dials nothing."""

    def __init__(self) -> None:
        self.addresses: list[str] = []

    def __call__(self, ip: str, port: int) -> None:
        self.addresses.append(ip)
        raise OSError(errno.ENETUNREACH, "Network is unreachable")


@pytest.mark.parametrize(
    ("failure", "answer"),
    [
        (socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution"), None),
        (socket.gaierror(socket.EAI_NONAME, "Name or service not known"), None),
        (OSError(errno.ENETUNREACH, "Network is unreachable"), None),
        (None, "93.184.216.34"),  # resolved from a cache, but no route out
    ],
    ids=["eai-again", "eai-noname", "enetunreach", "cached-name-no-route"],
)
async def test_offline_the_demo_frankfurter_call_is_upstream_unavailable(
    failure: OSError | None, answer: str | None
) -> None:
    demo = next(
        op for op in load_demo_file(8090).operations if op.name == "frankfurter_latest_rate"
    )
    spec = operation_from_builtins(
        spec_to_builtins(demo)
    )  # as the seed stores and the gateway reads it
    compiled = compile_operation(spec)
    built = compiled.build(compiled.validate({"base": "USD", "quote": "EUR"}))
    assert (built.method, built.url) == (
        "GET",
        f"https://{FRANKFURTER_HOST}/v1/latest?base=USD&symbols=EUR",
    )
    resolver, network = OfflineResolver(failure, answer), NoNetwork()
    # The gateway's default policy and executor configuration (no allowlist needed: public).
    executor = UpstreamExecutor(AddressPolicy(), resolver=resolver, connect_check=network)
    upstream = UpstreamCall()
    async with executor:
        with pytest.raises(ToolError) as caught:  # the upstream step, as tools/call runs it
            await compiled.call(executor, built, upstream, egress=None)

    structured = caught.value.to_structured()
    assert (structured["error_code"], structured["recoverable"]) == ("upstream_unavailable", True)
    attempts = spec.execution_config.retries + 1  # a GET: every attempt was made, none hung
    assert upstream.attempts == caught.value.details["attempts"] == attempts
    assert upstream.status is None
    # A name that resolved is cached by the executor (and judged again from the cache).
    assert resolver.asked == [FRANKFURTER_HOST] * (attempts if answer is None else 1)
    assert network.addresses == ([] if answer is None else [answer] * attempts)  # nothing dialled


async def test_the_demo_sales_api_answers_the_sales_get_operations(
    database_url: str, tmp_path: Path
) -> None:
    async with (
        demo_gateway(database_url, tmp_path) as demo,  # allowlists exactly the demo API
        httpx.AsyncClient(base_url=demo.gateway.url, timeout=20) as http,
    ):
        caller = Caller(http, "/mcp/v1/default/sales", demo.agent_key)
        for era in ERAS:
            order = await caller.call(era, "sales_get_order", {"order_id": "ord_456"})
            assert order["isError"] is False, order
            assert order["structuredContent"] == {
                "order_id": "ord_456",
                "status": "paid",
                "customer_id": "cus_123",
                "amount": 4999,
                "refunded_amount": 0,
                "currency": "EUR",
            }

            missing = await caller.call(era, "sales_get_order", {"order_id": "ord_999"})
            assert_tool_error(missing, "upstream_not_found")

            invalid = await caller.call(era, "sales_get_order", {"order_id": "../orders"})
            assert_tool_error(invalid, "invalid_arguments")

            listed = await caller.call(era, "sales_list_orders", {"customer_id": "cus_123"})
            assert listed["isError"] is False, listed
            orders = [
                {"order_id": "ord_123", "status": "draft", "amount": 1200, "currency": "EUR"},
                {"order_id": "ord_456", "status": "paid", "amount": 4999, "currency": "EUR"},
            ]
            # An array result is wrapped as {"items": [...]} for the 2025 protocol versions.
            expected = orders if era == "modern" else {"items": orders}
            assert listed["structuredContent"] == expected

            paid = await caller.call(era, "sales_list_orders", {"status": "paid"})
            items = paid["structuredContent"]
            items = items if era == "modern" else items["items"]
            assert [o["order_id"] for o in items] == ["ord_456", "ord_789"]
