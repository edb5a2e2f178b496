"""The fuzzed gateway's catalog: tools whose input schemas use every JSON Schema
keyword the operation compiler evaluates (shared.engine.compiler: Draft 2020-12,
with Crank's RE2 and uniqueness keywords, and format checking), a loopback echo
upstream they call, and the seed that publishes them through the admin API.

Every tool sends its arguments upstream as the JSON body (POST, the default
body), so the echo upstream can tell whether what the gateway validated is
what it sent; ``item_lookup`` puts one argument in the URL path, where the
path-value checks apply; ``refund_order`` needs a human approval.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx

from tests.support.api import auth, grant_egress
from tests.support.threaded_http import serve_threaded
from tests.support.tool_calls import ok, publish_agent, publish_operation

WORKSPACE = "default"
AGENT = "fuzz"
OTHER_AGENT = "fuzz-other"
MCP_PATH = f"/mcp/v1/{WORKSPACE}/{AGENT}"
APPROVALS_PATH = f"{MCP_PATH}/approvals"
ALLOWED_ORIGIN = "https://approver.example.com"
APPROVAL_TOOL = "refund_order"
PATH_TOOL = "item_lookup"

# Each keyword group in a tool of its own, so a failure names the group.
INPUT_SCHEMAS: dict[str, dict[str, Any]] = {
    # The flat shape the fast path judges (shared.engine.schema_fast_path).
    "flat_scalars": {
        "type": "object",
        "properties": {
            "code": {"type": "string", "pattern": "^[A-Z]{3}$"},
            "label": {"type": "string", "minLength": 1, "maxLength": 12},
            "colour": {"type": "string", "enum": ["red", "green", "blue"]},
            "count": {"type": "integer", "minimum": 1, "maximum": 100},
            "ratio": {"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1},
            "urgent": {"type": "boolean"},
            "nothing": {"type": "null"},
        },
        "required": ["code", "count"],
        "additionalProperties": False,
    },
    "scalar_rules": {
        "type": "object",
        "properties": {
            "version": {"const": 2},
            "step": {"type": "integer", "multipleOf": 5},
            "price": {"type": "number", "multipleOf": 0.01, "minimum": 0},
            "maybe": {"type": ["string", "null"], "maxLength": 8},
            "mixed": {"enum": [1, "one", True, None, [1], {"a": 1}]},
            "weight": {"type": "number", "minimum": -10.5, "maximum": 10.5},
        },
        "required": ["version"],
        "additionalProperties": False,
    },
    "formats": {
        "type": "object",
        "properties": {
            "email": {"type": "string", "format": "email"},
            "day": {"type": "string", "format": "date"},
            "at": {"type": "string", "format": "date-time"},
            "clock": {"type": "string", "format": "time"},
            "ipv4": {"type": "string", "format": "ipv4"},
            "ipv6": {"type": "string", "format": "ipv6"},
            "id": {"type": "string", "format": "uuid"},
            "regex": {"type": "string", "format": "regex"},
        },
        "additionalProperties": False,
    },
    "arrays": {
        "type": "object",
        "properties": {
            "tags": {
                "type": "array",
                "items": {"type": "string", "maxLength": 6},
                "minItems": 1,
                "maxItems": 5,
                "uniqueItems": True,
            },
            "point": {
                "type": "array",
                "prefixItems": [{"type": "number"}, {"type": "number"}],
                "items": False,
            },
            "scores": {
                "type": "array",
                "contains": {"type": "integer", "minimum": 90},
                "minContains": 1,
                "maxContains": 2,
                "maxItems": 6,
            },
            "matrix": {
                "type": "array",
                "items": {"type": "array", "items": {"type": "integer"}, "maxItems": 3},
                "maxItems": 3,
            },
        },
        "required": ["tags"],
        "additionalProperties": False,
    },
    "objects": {
        "type": "object",
        "properties": {
            "address": {
                "type": "object",
                "properties": {
                    "street": {"type": "string", "maxLength": 30},
                    "city": {"type": "string", "minLength": 1, "maxLength": 20},
                    "geo": {
                        "type": "object",
                        "properties": {"lat": {"type": "number"}, "lon": {"type": "number"}},
                        "required": ["lat", "lon"],
                        "additionalProperties": False,
                    },
                },
                "required": ["city"],
                "additionalProperties": False,
            },
            "labels": {
                "type": "object",
                "propertyNames": {"pattern": "^[a-z]{1,8}$"},
                "additionalProperties": {"type": "string", "maxLength": 10},
                "maxProperties": 4,
            },
            "metrics": {
                "type": "object",
                "patternProperties": {"^m_[0-9]+$": {"type": "integer"}},
                "additionalProperties": False,
                "minProperties": 1,
            },
            "card": {"type": "string", "maxLength": 19},
            "cvc": {"type": "string", "pattern": "^[0-9]{3}$"},
            "billing": {"type": "string", "maxLength": 30},
        },
        "dependentRequired": {"card": ["cvc"]},
        "dependentSchemas": {"billing": {"required": ["address"]}},
        "additionalProperties": False,
    },
    "composed": {
        "type": "object",
        "$defs": {
            "money": {
                "type": "object",
                "properties": {
                    "amount": {"type": "integer", "minimum": 0},
                    "currency": {"enum": ["USD", "EUR", "RUB"]},
                },
                "required": ["amount", "currency"],
                "additionalProperties": False,
            },
        },
        "properties": {
            "price": {"$ref": "#/$defs/money"},
            "discount": {"anyOf": [{"$ref": "#/$defs/money"}, {"type": "null"}]},
            "target": {
                "oneOf": [
                    {"type": "integer", "minimum": 1},
                    {"type": "string", "pattern": "^user-[0-9]+$"},
                ]
            },
            "note": {"allOf": [{"type": "string"}, {"minLength": 2}, {"maxLength": 20}]},
            "status": {"type": "string", "not": {"enum": ["deleted"]}},
            "kind": {"enum": ["person", "company"]},
            "tax_id": {"type": "string"},
        },
        "if": {"properties": {"kind": {"const": "company"}}, "required": ["kind"]},
        "then": {"required": ["tax_id"]},
        "unevaluatedProperties": False,
        "required": ["price"],
    },
    PATH_TOOL: {
        "type": "object",
        "properties": {
            "item_id": {"type": "string", "minLength": 1, "maxLength": 40},
            "verbose": {"type": "boolean"},
        },
        "required": ["item_id"],
        "additionalProperties": False,
    },
    APPROVAL_TOOL: {
        "type": "object",
        "properties": {
            "order_id": {"type": "integer", "minimum": 1},
            "reason": {"type": "string", "maxLength": 200},
        },
        "required": ["order_id"],
        "additionalProperties": False,
    },
}
TOOLS = tuple(INPUT_SCHEMAS)


def operation(name: str, upstream_port: int) -> dict[str, Any]:
    """The operation of tool ``name``: its arguments POSTed to the echo upstream."""
    base = f"http://127.0.0.1:{upstream_port}"
    spec: dict[str, Any] = {
        "name": name,
        "description": f"Fuzz target {name}. Use only in the gateway's fuzz tests.",
        "input": INPUT_SCHEMAS[name],
        "request": {"method": "POST", "url": f"{base}/echo/{name}"},
        "execution_config": {"timeout_ms": 5000, "retries": 0},
    }
    if name == PATH_TOOL:
        spec["request"] = {"method": "GET", "url": base + "/items/{item_id}"}
    if name == APPROVAL_TOOL:
        spec["safety"] = {"approval": True}
    return spec


@dataclass(frozen=True)
class Keys:
    agent: str  # agent key of AGENT
    approval: str  # approval key of AGENT
    other_agent: str  # agent key of OTHER_AGENT
    other_approval: str  # approval key of OTHER_AGENT


async def seed(client: httpx.AsyncClient, admin: str, upstream_port: int) -> Keys:
    """Workspace ``default`` with every fuzz tool published to AGENT and OTHER_AGENT."""
    await ok(await client.post("/api/v1/workspaces", json={"slug": WORKSPACE}, headers=auth(admin)))
    await grant_egress(client, admin, WORKSPACE, f"127.0.0.1:{upstream_port}")
    for name in TOOLS:
        await publish_operation(client, admin, operation(name, upstream_port))
    agent = await publish_agent(client, admin, AGENT, list(TOOLS))
    other = await publish_agent(client, admin, OTHER_AGENT, list(TOOLS))
    approvals = []
    for slug in (AGENT, OTHER_AGENT):
        created = await ok(
            await client.post(
                f"/api/v1/workspaces/{WORKSPACE}/keys",
                json={"agent": slug, "kind": "approval"},
                headers=auth(admin),
            )
        )
        approvals.append(str(created.json()["key"]))
    return Keys(agent, approvals[0], other, approvals[1])


def gateway_env(upstream_port: int) -> dict[str, str]:
    """The fuzzed gateway's settings: no rate limit and key look-ups unthrottled (so
    every 429 and 503 would be a finding rather than the fuzzer's own pace), one
    allowed browser origin, the echo upstream allowlisted, and an approval wait
    short enough that a call held for its decision does not stall the run."""
    return {
        "CRANK_RATE_LIMIT": "off",
        "CRANK_KEY_LOOKUP_LIMIT": "100000/1",
        "CRANK_KEY_LOOKUP_LIMIT_PER_ADDRESS": "100000/1",
        "CRANK_ALLOWED_ORIGINS": ALLOWED_ORIGIN,
        "CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{upstream_port}",
        "CRANK_APPROVAL_WAIT_S": "1",
    }


NOTHING = object()  # what an echo that was never called delivered


class EchoUpstream:
    """What the echo upstream received last, per tool: the decoded JSON body (None
    for no body) or, for ``item_lookup``, the request path and query."""

    def __init__(self) -> None:
        self.port = 0
        self.received: dict[str, Any] = {}
        self.lock = threading.Lock()

    def take(self, tool: str) -> Any:
        """What ``tool``'s last call delivered, forgotten once read; ``NOTHING`` if none came."""
        with self.lock:
            return self.received.pop(tool, NOTHING)


def _echo_handler(echo: EchoUpstream) -> type[BaseHTTPRequestHandler]:
    class Echo(BaseHTTPRequestHandler):
        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            tool = PATH_TOOL if self.path.startswith("/items/") else self.path[len("/echo/") :]
            value: Any = self.path if tool == PATH_TOOL else json.loads(raw) if raw else None
            with echo.lock:
                echo.received[tool] = value
            body = b'{"ok": true}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Echo


@contextmanager
def serve_echo() -> Iterator[EchoUpstream]:
    """The echo upstream on a free loopback port, served from a thread: the fuzz
    client blocks while the gateway calls it."""
    echo = EchoUpstream()
    with serve_threaded(_echo_handler(echo)) as server:
        echo.port = server.port
        yield echo
