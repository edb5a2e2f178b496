"""Hostile arguments through a real gateway: the pathological pattern and a huge array
answer at once, and the event loop every tenant shares keeps serving meanwhile.

``^(a+)+$`` against 10,000 ``a`` and a ``!`` is 2^10000 steps for a
backtracking engine: before schema regexes ran on RE2 such a call never
answered, and ``/healthz`` on the same process stalled with it. The
arguments never reach an upstream (validation refuses them first); the
operations point at a loopback port that is not allowlisted, so even a valid
call stops at the SSRF guard.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.api import Client, auth
from tests.support.gateway import run_gateway
from tests.support.processes import free_port
from tests.support.tool_calls import (
    Caller,
    assert_tool_error,
    ok,
    publish_agent,
    publish_operation,
)

PATH = "/mcp/v1/default/vouchers"
EVIL = "^(a+)+$"
HOSTILE = "a" * 10_000 + "!"
# Generous for a loaded 2-core machine; the bug never answers at all.
CALL_BOUND_S = 3.0
HEALTHZ_BOUND_S = 1.0


def operation(name: str, description: str, argument: str, declaration: Any) -> dict[str, Any]:
    return {
        "name": name,
        "description": description,
        "input": {
            "type": "object",
            "properties": {argument: declaration},
            "required": [argument],
            "additionalProperties": False,
        },
        "request": {"method": "GET", "url": f"http://127.0.0.1:{free_port()}/vouchers"},
        "response": {"select": "{code: code, valid: valid}"},
    }


OPERATIONS = [
    # flat: the fast path judges first
    operation(
        "check_voucher",
        "Checks one voucher code. Use when the user gives a voucher code.",
        "code",
        {"type": "string", "pattern": EVIL, "description": "Voucher code, e.g. aaa"},
    ),
    # items: jsonschema judges, with Crank's RE2 and uniqueItems keywords
    operation(
        "check_voucher_batch",
        "Checks several voucher codes at once. Use when the user lists voucher codes.",
        "codes",
        {
            "type": "array",
            "uniqueItems": True,
            "items": {"type": "string", "pattern": EVIL},
            "description": "Voucher codes, e.g. [aaa]",
        },
    ),
]


async def timed(call: Any) -> tuple[float, Any]:
    started = time.perf_counter()
    result = await call
    return time.perf_counter() - started, result


async def test_hostile_arguments_answer_quickly_and_never_stall_the_gateway(
    client: Client, admin_token: str, database_url: str, tmp_path: Path
) -> None:
    await ok(
        await client.post("/api/v1/workspaces", json={"slug": "default"}, headers=auth(admin_token))
    )
    for spec in OPERATIONS:
        await publish_operation(client, admin_token, spec)
    key = await publish_agent(client, admin_token, "vouchers", [s["name"] for s in OPERATIONS])
    async with (
        run_gateway(database_url, tmp_path, extra_env={"CRANK_RATE_LIMIT": "off"}) as gateway,
        httpx.AsyncClient(base_url=gateway.url, timeout=30) as http,
    ):
        caller = Caller(http, PATH, key)
        await caller.call("modern", "check_voucher", {"code": "b"})  # warm up
        healthz: list[float] = []
        hostile_done = asyncio.Event()

        async def ping() -> None:
            while not hostile_done.is_set():
                elapsed, response = await timed(http.get("/healthz"))
                assert response.status_code == 200
                healthz.append(elapsed)
                await asyncio.sleep(0.01)

        async def hostile() -> list[tuple[float, Any]]:
            try:
                for _ in range(2):  # a first round while /healthz is being asked too
                    await caller.call("modern", "check_voucher", {"code": HOSTILE})
                return list(
                    await asyncio.gather(
                        timed(caller.call("modern", "check_voucher", {"code": HOSTILE})),
                        timed(caller.call("legacy", "check_voucher", {"code": HOSTILE})),
                        timed(
                            caller.call(
                                "modern", "check_voucher_batch", {"codes": ["aaa", HOSTILE]}
                            )
                        ),
                        timed(
                            caller.call("modern", "check_voucher_batch", {"codes": ["a"] * 200_000})
                        ),
                        timed(caller.call("modern", "check_voucher", {"code": "aaaa"})),
                    )
                )
            finally:
                hostile_done.set()

        answers, _ = await asyncio.gather(hostile(), ping())

    slowest_call = max(elapsed for elapsed, _ in answers)
    slowest_ping = max(healthz)
    print(
        f"slowest hostile call {slowest_call * 1000:.0f} ms, slowest /healthz "
        f"{slowest_ping * 1000:.0f} ms over {len(healthz)} pings"
    )
    assert slowest_call < CALL_BOUND_S
    assert slowest_ping < HEALTHZ_BOUND_S
    pattern, legacy, batch, huge, benign = (result for _, result in answers)
    for result in (pattern, legacy):
        error = assert_tool_error(result, "invalid_arguments")
        assert error["message"].startswith("Invalid arguments: $.code:")
    assert "$.codes[1]:" in assert_tool_error(batch, "invalid_arguments")["message"]
    huge_error = assert_tool_error(huge, "invalid_arguments")["message"]
    assert "$.codes: the arguments hold more than 10000 values" in huge_error
    # a valid call passes validation and reaches the SSRF guard (loopback is not allowlisted)
    assert_tool_error(benign, "upstream_blocked")
