"""One fuzz case at a time against a running gateway: send it, judge the answer
(tests.gateway.fuzz.oracles), count its outcome. The pytest tests and
bench/fuzz_gateway.py run the same cases; only how many differs.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any
from urllib.parse import unquote

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.gateway.fuzz.arguments import (
    dumps,
    mutated_arguments,
    reference_valid,
    valid_arguments,
)
from tests.gateway.fuzz.catalog import (
    APPROVAL_TOOL,
    MCP_PATH,
    NOTHING,
    PATH_TOOL,
    TOOLS,
    EchoUpstream,
    Keys,
)
from tests.gateway.fuzz.oracles import Violation, check_approvals, check_mcp
from tests.gateway.fuzz.strategies import (
    FRESH_SESSION,
    LEGACY_VERSIONS,
    META_CAPABILITIES,
    META_VERSION,
    MODERN_VERSION,
    approval_requests,
    mcp_requests,
)
from tests.gateway.fuzz.wire import Answer, Sent, send


@dataclass
class Target:
    """A fuzzed gateway: its port, keys, echo upstream, and the outcomes counted so far."""

    port: int
    keys: Keys
    echo: EchoUpstream
    outcomes: Counter[str] = field(default_factory=Counter)
    _sessions: dict[str, str] = field(default_factory=dict)

    def count(self, run: str, outcome: str) -> str:
        self.outcomes[f"{run}: {outcome}"] += 1
        return outcome

    def open_session(self, version: str, *, reuse: bool = True) -> str:
        """A legacy session of the agent key; ``reuse``: the one opened before, if any."""
        if reuse and version in self._sessions:
            return self._sessions[version]
        init = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "fuzz", "version": "1"},
            },
        }
        headers = (
            ("Authorization", f"Bearer {self.keys.agent}".encode()),
            ("Content-Type", b"application/json"),
            ("Accept", b"application/json, text/event-stream"),
        )
        answer = send(self.port, Sent("POST", MCP_PATH, headers, dumps(init)))
        session = answer.header("mcp-session-id")
        assert answer.status == 200, answer
        assert session, answer
        self._sessions[version] = session
        return session


def _with_sessions(target: Target, sent: Sent) -> Sent:
    """``sent`` with each ``fresh:<version>`` session id replaced by a new session's id
    (a new one each time: a fuzzed DELETE may have ended the last)."""
    headers = []
    for name, value in sent.headers:
        if name == "MCP-Session-Id" and value.startswith(FRESH_SESSION.encode()):
            version = value[len(FRESH_SESSION) :].decode()
            value = target.open_session(version, reuse=False).encode()
        headers.append((name, value))
    return Sent(sent.method, sent.path, tuple(headers), sent.body, sent.opens_stream)


def mcp_case(target: Target, run: str, sent: Sent) -> str:
    """One request to the MCP endpoint; its checked outcome."""
    sent = _with_sessions(target, sent)
    return target.count(run, check_mcp(sent, send(target.port, sent)))


def approval_case(target: Target, run: str, sent: Sent, origin_allowed: bool | None) -> str:
    return target.count(run, check_approvals(sent, send(target.port, sent), origin_allowed))


def tool_call(target: Target, era: str, tool: str, arguments: Any) -> Sent:
    """A well-formed tools/call of ``tool`` in ``era`` (None: no ``arguments`` at all)."""
    params: dict[str, Any] = {"name": tool}
    if arguments is not None:
        params["arguments"] = arguments
    headers = [
        ("Authorization", f"Bearer {target.keys.agent}".encode()),
        ("Content-Type", b"application/json"),
        ("Accept", b"application/json, text/event-stream"),
    ]
    if era == "modern":
        params["_meta"] = {META_VERSION: MODERN_VERSION, META_CAPABILITIES: {}}
        headers += [
            ("MCP-Protocol-Version", MODERN_VERSION.encode()),
            ("Mcp-Method", b"tools/call"),
            ("Mcp-Name", tool.encode()),
        ]
    else:
        session = target.open_session(LEGACY_VERSIONS[-1])
        headers += [("MCP-Session-Id", session.encode())]
    body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": params}
    return Sent("POST", MCP_PATH, tuple(headers), dumps(body))


def _has_nul(value: Any) -> bool:
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(v) for v in value)
    return False


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers by their decimal value, so a whole float sent as
    the integer of its shortest spelling (docs/architecture.md, "Argument numbers":
    ``3.5e16`` -> ``35000000000000000``) is the same number."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, int | float) and isinstance(b, int | float):
        return Decimal(repr(a)) == Decimal(repr(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _result(answer: Answer) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(answer.body)["result"]
    return result


def argument_case(target: Target, run: str, era: str, tool: str, arguments: Any) -> str:
    """A tools/call with ``arguments``: a success that delivered exactly them upstream
    when the schema accepts them, else ``invalid_arguments`` naming a field with
    nothing sent upstream."""
    sent = tool_call(target, era, tool, arguments)
    target.echo.take(tool)  # forget what a fuzzed tools/call before delivered
    answer = send(target.port, sent)
    outcome = check_mcp(sent, answer)
    valid = reference_valid(tool, arguments)
    # The approval worker delivers approved calls of APPROVAL_TOOL whenever they run.
    delivered = target.echo.take(tool) if tool != APPROVAL_TOOL else NOTHING
    refused = outcome == "200 tool invalid_arguments"
    if refused:
        message = _result(answer)["structuredContent"]["message"]
        if not message.startswith("Invalid arguments: $"):
            raise Violation(f"invalid_arguments that names no field: {message!r}")
        if delivered is not NOTHING:
            raise Violation(f"refused arguments reached the upstream: {arguments!r}")
    if valid and refused:
        # The documented refusals of arguments the schema accepts: a path value that
        # could leave the URL path, a NUL an approval row cannot store.
        allowed = (tool == PATH_TOOL and "$.item_id" in message) or (
            tool == APPROVAL_TOOL and _has_nul(arguments)
        )
        if not allowed:
            raise Violation(f"{tool} refused valid arguments {arguments!r}: {message}")
    elif valid:
        if outcome != "200 tool ok":
            raise Violation(f"{tool} {arguments!r}: {outcome} {answer.body[:500]!r}")
        _check_delivered(tool, arguments, delivered, _result(answer))
    elif not refused:
        raise Violation(f"{tool} accepted invalid arguments {arguments!r}: {outcome}")
    return target.count(run, f"{'valid' if valid else 'invalid'} -> {outcome}")


def _check_delivered(tool: str, arguments: Any, delivered: Any, result: dict[str, Any]) -> None:
    if tool == APPROVAL_TOOL:  # nothing goes upstream before a human approves
        if result["structuredContent"].get("status") != "approval_required":
            raise Violation(f"{tool} without approval: {result!r}")
        return
    if delivered is NOTHING:
        raise Violation(f"{tool} answered without calling the upstream: {arguments!r}")
    if tool == PATH_TOOL:
        path = unquote(str(delivered).split("?")[0].removeprefix("/items/"))
        if path != arguments["item_id"]:
            raise Violation(f"{tool} sent {delivered!r} for {arguments!r}")
        return
    sent = {} if delivered is None else delivered  # no arguments: no body
    expected = {} if arguments is None else arguments
    if not same_json(sent, expected):
        raise Violation(f"{tool} sent {sent!r} upstream for {arguments!r}")


def pending_approvals(target: Target, count: int, *, first_order: int = 1) -> tuple[str, ...]:
    """``count`` new pending approvals of ``refund_order`` (the agent's tools/calls); their ids."""
    ids = []
    for order in range(first_order, first_order + count):
        sent = tool_call(target, "modern", APPROVAL_TOOL, {"order_id": order})
        answer = send(target.port, sent)
        structured = _result(answer)["structuredContent"]
        assert structured["status"] == "approval_required", structured
        ids.append(str(structured["approval_id"]))
    return tuple(ids)


# --- whole runs: the tests and bench/fuzz_gateway.py differ only in ``config`` ---


def fuzz_mcp(target: Target, era: str, config: settings) -> None:
    """``config.max_examples`` fuzzed requests to the MCP endpoint in ``era``."""

    @config
    @given(mcp_requests(target.keys, era))
    def case(drawn: tuple[Sent, bool | None]) -> None:
        sent, origin_allowed = drawn
        outcome = mcp_case(target, era, sent)
        if origin_allowed is False and outcome != "403 -32001":
            raise Violation(f"a foreign Origin got {outcome}: {sent!r}")

    case()


def _calls(tool: str) -> st.SearchStrategy[tuple[str, Any]]:
    """(tool, arguments): drawn from its schema, or one mutation away."""
    return st.tuples(st.just(tool), st.one_of(valid_arguments(tool), mutated_arguments(tool)))


def fuzz_arguments(target: Target, era: str, config: settings) -> None:
    """``config.max_examples`` tools/calls of the catalog's tools with fuzzed arguments."""

    @config
    @given(st.sampled_from(TOOLS).flatmap(_calls))
    def case(call: tuple[str, Any]) -> None:
        argument_case(target, f"{era} arguments", era, *call)

    case()


def fuzz_approvals(target: Target, known: tuple[str, ...], config: settings) -> None:
    """``config.max_examples`` fuzzed requests to the approval endpoints; ``known``:
    ids of real approvals of the agent (pending ones get decided on the way)."""

    @config
    @given(approval_requests(target.keys, known))
    def case(drawn: tuple[Sent, bool | None]) -> None:
        approval_case(target, "approvals", *drawn)

    case()
