"""Nothing secret in the logs, even at debug level (docs/security.md, "What logs
never hold").

The control plane and a gateway run as deployed (granian) with
``CRANK_LOG_LEVEL=debug``, their stdout and stderr captured to files, through
a full scenario: the admin token creating a workspace, a secret, operations
whose requests carry that secret as a bearer token, agents, agent and approval
keys and a webhook subscription (its signing secret in the answer); tools/call
with a distinctive value in every argument, in both protocol eras, one of them
to an upstream that answers no HTTP (its failure's reason is logged); a DELETE
confirmed with a ``ct_`` token; a DELETE confirmed by the human through a
2026-07-28 form (its ``requestState`` echoed back); an approval asked for,
approved with the approval key, run by the worker and delivered, with its
webhooks signed and delivered; try-it on the control plane; and
``CRANK_SECRET_KEY`` rotated by a control plane started with a new key. Then
no spelling (raw, JSON-escaped, percent-encoded, base64:
tests/support/masking.py) of the admin token, a key, either secret key, the
secret, the signing secret, a confirmation token, a request state or an
argument value may appear in any log, and every log must hold debug lines, so
the capture is known to work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx

from tests.support.api import auth, grant_egress
from tests.support.db import TEST_SECRET_KEY
from tests.support.gateway import (
    run_control_plane,
    run_gateway,
    serve_no_http,
    serve_upstream,
    wait_until,
)
from tests.support.masking import leaks
from tests.support.mcp import META, VERSION, modern
from tests.support.orders import OrdersUpstream, order_operation, order_operations
from tests.support.tool_calls import (
    BASE,
    Caller,
    confirmed,
    ok,
    publish_agent,
    publish_operation,
    rpc,
    token_of,
)
from tests.support.webhooks import serve_receiver, subscribe

SECRET = 'logs-secret/4c1d+e"Q8-wert'  # SHOP_TOKEN: every operation's bearer token
ARGUMENT = "argvalue-7f3a9c{}"  # every argument value, numbered per call
PATH = "/mcp/v1/default/ops"
TOKEN_PATH = "/mcp/v1/default/ops-token"
APPROVALS = "/v1/default/ops/approvals"
ELICITING = {
    "io.modelcontextprotocol/protocolVersion": VERSION,
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
}
DEBUG = {"CRANK_LOG_LEVEL": "debug"}
NEW_SECRET_KEY = "rotated-secret-key-that-is-long-enough-9f8e7d6c"


class Needles:
    """Every value no log may hold, by what it is."""

    def __init__(self) -> None:
        self.values: dict[str, str] = {"the secret": SECRET, "CRANK_SECRET_KEY": TEST_SECRET_KEY}
        self._arguments = 0

    def add(self, what: str, value: str) -> str:
        self.values[what] = value
        return value

    def argument(self) -> str:
        self._arguments += 1
        return self.add(f"argument {self._arguments}", ARGUMENT.format(self._arguments))


async def set_up(
    http: httpx.AsyncClient, admin: str, port: int, no_http_port: int, needles: Needles
) -> dict[str, str]:
    """Workspace default as the admin token sets it up over HTTP; the keys by name."""
    h = auth(admin)
    await ok(await http.post("/api/v1/workspaces", json={"slug": "default"}, headers=h))
    await ok(await http.put(f"{BASE}/secrets/SHOP_TOKEN", json={"value": SECRET}, headers=h))
    await grant_egress(http, admin, "default", f"127.0.0.1:{port}", f"127.0.0.1:{no_http_port}")
    bearer = {"type": "bearer", "secret": "SHOP_TOKEN"}
    up = f"http://127.0.0.1:{port}"
    approved = {"approval": True}
    specs = [
        *order_operations(port),
        order_operation("hold_order", "POST", f"{up}/orders/{{order_id}}/archive", safety=approved),
        order_operation("read_no_http", "GET", f"http://127.0.0.1:{no_http_port}/o/{{order_id}}"),
    ]
    for spec in specs:
        spec["request"] = spec["request"] | {"auth": bearer}
        await publish_operation(http, admin, spec)
    names = [spec["name"] for spec in specs]
    keys = {"agent": await publish_agent(http, admin, "ops", names)}
    token_agent = {
        "slug": "ops-token",
        "operations": ["delete_order"],
        "confirmation_mode": "token",
    }
    applied = await http.post(
        f"{BASE}/apply", params={"publish": "true"}, json={"agents": [token_agent]}, headers=h
    )
    assert applied.status_code == 200, applied.text
    for agent, kind in (("ops-token", "agent"), ("ops", "approval")):
        body = {"agent": agent, "kind": kind}
        created = await ok(await http.post(f"{BASE}/keys", json=body, headers=h))
        keys[f"{agent} {kind}"] = str(created.json()["key"])
    for name, key in keys.items():
        needles.add(f"key {name}", key)
    return keys


async def call(
    http: httpx.AsyncClient, url: str, key: str, params: dict[str, Any], meta: dict[str, Any]
) -> dict[str, Any]:
    """A raw 2026-07-28 tools/call; the result of its HTTP 200 answer."""
    answer = await http.post(
        url,
        json=rpc("tools/call", {**params, "_meta": meta}),
        headers=modern(key, "tools/call", **{"Mcp-Name": params["name"]}),
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()["result"]
    return result


async def confirm_with_token(gateway_url: str, key: str, needles: Needles) -> None:
    async with httpx.AsyncClient(timeout=20) as http:
        caller = Caller(http, gateway_url + TOKEN_PATH, key)
        arguments = {"order_id": needles.argument()}
        token = needles.add(
            "confirmation token", token_of(await caller.call("modern", "delete_order", arguments))
        )
        done = await caller.call("modern", "delete_order", confirmed(arguments, token))
    assert done["isError"] is False, done


async def confirm_with_form(gateway_url: str, key: str, needles: Needles) -> None:
    params: dict[str, Any] = {"name": "delete_order", "arguments": {"order_id": needles.argument()}}
    async with httpx.AsyncClient(timeout=20) as http:
        asked = await call(http, gateway_url + PATH, key, params, ELICITING)
        assert asked["resultType"] == "input_required", asked
        state = needles.add("request state", asked["requestState"])
        [request_key] = asked["inputRequests"]
        params |= {"requestState": state, "inputResponses": {request_key: {"action": "accept"}}}
        done = await call(http, gateway_url + PATH, key, params, ELICITING)
    assert done["isError"] is False, done


async def approve_and_deliver(gateway_url: str, keys: dict[str, str], needles: Needles) -> None:
    params = {"name": "hold_order", "arguments": {"order_id": needles.argument()}}
    approver = {"Authorization": f"Bearer {keys['ops approval']}"}
    async with httpx.AsyncClient(base_url=gateway_url, timeout=20) as http:
        asked = await call(http, PATH, keys["agent"], params, META)
        approval_id = asked["structuredContent"]["approval_id"]
        decided = await http.post(
            f"{APPROVALS}/{approval_id}/approve", json={"approve": "yes"}, headers=approver
        )
        assert decided.status_code == 200, decided.text

        async def completed() -> bool:
            record = await http.get(f"{APPROVALS}/{approval_id}", headers=approver)
            return bool(record.json()["status"] == "completed")

        await wait_until(completed, timeout_s=20)
        delivered = await call(http, PATH, keys["agent"], params, META)
    assert delivered["_meta"]["crank/approval_status"] == "completed", delivered


async def test_no_log_line_holds_a_key_token_secret_state_or_argument_value(
    admin_token: str, database_url: str, tmp_path: Path
) -> None:
    needles = Needles()
    needles.add("admin token", admin_token)
    upstream = OrdersUpstream()
    async with (
        serve_upstream(upstream.app(), upstream.port) as port,
        serve_no_http() as no_http_port,
        serve_receiver() as receiver,
    ):
        upstreams = (port, no_http_port, receiver.port)
        allow = {"CRANK_UPSTREAM_ALLOWLIST": ",".join(f"127.0.0.1:{p}" for p in upstreams)}
        async with (
            run_control_plane(database_url, tmp_path, extra_env=allow | DEBUG) as control_plane,
            httpx.AsyncClient(base_url=control_plane.url, timeout=20) as admin_http,
        ):
            keys = await set_up(admin_http, admin_token, port, no_http_port, needles)
            await grant_egress(admin_http, admin_token, "default", f"127.0.0.1:{receiver.port}")
            hook = await subscribe(admin_http, admin_token, receiver.url, agent="ops")
            receiver.secret = needles.add("signing secret", hook["secret"])
            needles.add("signing key", hook["secret"].removeprefix("whsec_"))  # base64 of it
            env = allow | DEBUG | {"CRANK_WEBHOOK_RETRY_BASE_MS": "100"}
            async with run_gateway(database_url, tmp_path, extra_env=env) as gateway:
                async with httpx.AsyncClient(timeout=20) as http:
                    plain = {"name": "get_order", "arguments": {"order_id": needles.argument()}}
                    result = await call(http, gateway.url + PATH, keys["agent"], plain, META)
                    assert result["isError"] is False, result
                    legacy = Caller(http, gateway.url + PATH, keys["agent"])  # a session too
                    arguments = {"order_id": needles.argument()}
                    result = await legacy.call("legacy", "get_order", arguments)
                    assert result["isError"] is False, result
                    # An unusable answer: its reason is logged (tool_call_failed).
                    broken = {"name": "read_no_http", "arguments": {"order_id": needles.argument()}}
                    result = await call(http, gateway.url + PATH, keys["agent"], broken, META)
                    assert result["structuredContent"]["error_code"] == "upstream_response_invalid"
                await confirm_with_token(gateway.url, keys["ops-token agent"], needles)
                await confirm_with_form(gateway.url, keys["agent"], needles)
                await approve_and_deliver(gateway.url, keys, needles)

                async def delivered() -> bool:
                    return len(receiver.events()) == 3

                await wait_until(delivered, timeout_s=20)
            tried = await admin_http.post(
                f"{BASE}/operations/get_order/try",
                json={"arguments": {"order_id": needles.argument()}},
                headers=auth(admin_token),
            )
            assert tried.status_code == 200, tried.text
            assert tried.json()["result"]["is_error"] is False, tried.text
        # Key rotation: a control plane with a new key re-seals the secret and the
        # signing secret sealed under the old one.
        rotating = DEBUG | {
            "CRANK_SECRET_KEY": needles.add("new CRANK_SECRET_KEY", NEW_SECRET_KEY),
            "CRANK_SECRET_KEY_PREVIOUS": TEST_SECRET_KEY,
        }
        async with (
            run_control_plane(database_url, tmp_path, extra_env=rotating) as rotator,
            httpx.AsyncClient(base_url=rotator.url, timeout=20) as rotator_http,
        ):
            rotated = await rotator_http.post(
                "/api/v1/secrets/rotate-key", headers=auth(admin_token)
            )
            assert rotated.status_code == 200, rotated.text
            assert rotated.json()["rotated"] == 2  # SHOP_TOKEN and the signing secret
        logs = {
            "gateway": gateway.log(),
            "control plane": control_plane.log(),
            "rotating control plane": rotator.log(),
        }

    assert sum(upstream.hits.values()) == 6  # every call reached the upstream, once
    for name, text in logs.items():
        assert '"level": "debug"' in text, f"no debug line in the {name} log"
    found = {
        f"{what} in the {name} log": spellings
        for name, text in logs.items()
        for what, value in needles.values.items()
        if (spellings := leaks(text, [value]))
    }
    assert found == {}
