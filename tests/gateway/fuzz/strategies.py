"""Hypothesis strategies of HTTP requests for the gateway's fuzz tests and
bench/fuzz_gateway.py (the JSON values and tool arguments they carry are
tests.gateway.fuzz.arguments'):

- ``mcp_requests(era)``: requests to the MCP endpoint: raw bytes, JSON,
  JSON-RPC shapes and batches, under headers that are mostly right and
  sometimes anything (protocol version, session id, Mcp-Method/Mcp-Name,
  Origin, Accept, Content-Type, the key), with any HTTP method.
- ``approval_requests(ids)``: list/get/approve/deny with real and made-up ids,
  query strings, decision bodies, keys and Origins.

A request may need a live session: its ``MCP-Session-Id`` is then
``fresh:<version>`` until ``tests.gateway.fuzz.runs`` opens one and puts its id in.
"""

from __future__ import annotations

import base64
import json
import string
from typing import Any
from urllib.parse import quote

from hypothesis import strategies as st

from tests.gateway.fuzz.arguments import (
    dumps,
    json_scalars,
    json_values,
    lone_surrogates,
    mutated_arguments,
    valid_arguments,
)
from tests.gateway.fuzz.catalog import (
    ALLOWED_ORIGIN,
    APPROVALS_PATH,
    INPUT_SCHEMAS,
    MCP_PATH,
    TOOLS,
    Keys,
)
from tests.gateway.fuzz.wire import Header, Sent

LEGACY_VERSIONS = ("2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSION = "2026-07-28"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
FRESH_SESSION = "fresh:"  # + a legacy version: a session the runner opens per request
METHODS = (
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "server/discover",
    "subscriptions/listen",
    "prompts/list",
    "prompts/get",
    "resources/list",
    "resources/read",
    "resources/templates/list",
    "notifications/initialized",
    "notifications/cancelled",
    "tasks/get",
    "tasks/update",
    "tasks/cancel",
    "logging/setLevel",
)
# Origins with a known verdict (docs/mcp-interface.md, "Browsers (CORS)"; the
# fuzzed gateway listens on loopback, so loopback pages are allowed).
ALLOWED_ORIGINS = (ALLOWED_ORIGIN, "http://127.0.0.1:3000", "http://localhost", "http://[::1]:80")
REFUSED_ORIGINS = ("https://evil.example", "http://[::1", "http://[", "null", "file://")


_HEADER_CHARS = string.ascii_letters + string.digits + string.punctuation + " \t\xe9\xff"
header_text = st.text(alphabet=_HEADER_CHARS, max_size=40)


def _mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``usual`` nineteen times in twenty, else ``odd``: most requests pass most checks,
    so the fuzzer reaches the deep steps too."""
    return st.integers(0, 19).flatmap(lambda n: odd if n == 19 else usual)


def _rarely(draw: st.DrawFn, one_in: int) -> bool:
    """True once in ``one_in`` draws. The odd case is the largest number: Hypothesis
    leans towards the smallest, and the usual case should be the common one."""
    return bool(draw(st.integers(0, one_in - 1)) == one_in - 1)


# --- the MCP endpoint -------------------------------------------------------

_ids = st.integers(min_value=-(2**53), max_value=2**53) | st.text(max_size=20)
_odd_ids = (
    st.none()
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.lists(st.integers(), max_size=2)
)


@st.composite
def _meta(draw: st.DrawFn) -> Any:
    if _rarely(draw, 20):
        return draw(json_values)
    meta: dict[str, Any] = {}
    if not _rarely(draw, 20):
        meta[META_VERSION] = draw(
            _mostly(st.just(MODERN_VERSION), st.sampled_from(LEGACY_VERSIONS) | header_text)
        )
    if not _rarely(draw, 20):
        meta[META_CAPABILITIES] = draw(
            st.just({})
            | st.just({"extensions": {"io.modelcontextprotocol/tasks": {}}})
            | st.just({"elicitation": {"form": {}}})
            | json_values
        )
    if draw(st.booleans()):
        meta["progressToken"] = draw(_ids)
    return meta


@st.composite
def _params(draw: st.DrawFn, method: str, modern: bool) -> Any:
    if _rarely(draw, 15):
        return draw(json_values)
    params: dict[str, Any] = {}
    if method == "tools/call":
        tool = draw(_mostly(st.sampled_from(TOOLS), st.text(max_size=20)))
        params["name"] = tool
        kind = draw(st.integers(0, 9))
        if tool in INPUT_SCHEMAS and kind < 6:
            params["arguments"] = draw(valid_arguments(tool))
        elif tool in INPUT_SCHEMAS and kind < 8:
            params["arguments"] = draw(mutated_arguments(tool))
        elif kind < 9:
            params["arguments"] = draw(json_values)
    elif method == "initialize":
        params["protocolVersion"] = draw(st.sampled_from(LEGACY_VERSIONS) | header_text)
        params["capabilities"] = draw(st.just({}) | st.just({"elicitation": {}}) | json_values)
        params["clientInfo"] = {"name": "fuzz", "version": "1"}
    elif method == "tools/list" and draw(st.booleans()):
        params["cursor"] = draw(st.text(max_size=30) | json_scalars)
    elif method.startswith("tasks/"):
        params["taskId"] = draw(st.text(max_size=40) | st.just("approval_" + "0" * 32))
    elif method == "subscriptions/listen":
        params["notifications"] = draw(st.just({"toolsListChanged": True}) | json_values)
    elif method in ("prompts/get", "resources/read"):
        params["name" if method == "prompts/get" else "uri"] = draw(st.text(max_size=20))
    if (modern and not _rarely(draw, 10)) or _rarely(draw, 10):
        params["_meta"] = draw(_meta())
    return params


@st.composite
def rpc_messages(draw: st.DrawFn, modern: bool = False) -> Any:
    """A JSON-RPC message, mostly well framed, sometimes not."""
    # tools/call is the deep path: a third of the messages.
    known = st.sampled_from(("tools/call",) * (len(METHODS) // 2) + METHODS)
    method = draw(_mostly(known, st.text(max_size=20)))
    message: dict[str, Any] = {"jsonrpc": draw(json_scalars) if _rarely(draw, 15) else "2.0"}
    shape = draw(st.integers(0, 19))
    if shape == 19:  # a response, as a client answers an elicitation
        message["id"] = draw(_ids)
        message[draw(st.sampled_from(("result", "error")))] = draw(json_values)
        return message
    if shape == 18:
        message["method"] = draw(json_scalars)
    else:
        message["method"] = method
    if not method.startswith("notifications/") or draw(st.booleans()):
        message["id"] = draw(_odd_ids if _rarely(draw, 10) else _ids)
    if not _rarely(draw, 10):
        message["params"] = draw(_params(method, modern))
    if _rarely(draw, 20):
        message[draw(st.text(max_size=8))] = draw(json_values)
    return message


@st.composite
def _bodies(draw: st.DrawFn, modern: bool) -> tuple[bytes, Any]:
    """(body bytes, the message it holds when it is one)."""
    kind = draw(st.integers(0, 29))  # 0-20: one message, the rest in the order below
    if kind == 29:
        return draw(st.binary(max_size=300)), None
    if kind == 28:  # nested around the 64-level bound, or far past it
        depth = draw(st.sampled_from((62, 63, 64, 65, 5000)))
        return b"[" * depth + b"]" * depth, None
    if kind == 27:  # just over the 1 MiB body bound (CRANK_MAX_BODY_BYTES)
        return b" " * (1_048_576 + 1), None
    if kind in ((24, 25, 26) if not modern else (26,)):  # a batch (only 2025-03-26 takes one)
        items = draw(
            st.lists(rpc_messages(modern) | json_values, max_size=8)
            | st.integers(99, 102).map(
                lambda n: [{"jsonrpc": "2.0", "id": i, "method": "ping"} for i in range(n)]
            )
        )
        return dumps(items), items
    if kind == 23:
        return dumps(draw(json_values)), None
    message = draw(rpc_messages(modern))
    body = dumps(message)
    if kind == 22 and body:  # broken on the way: a cut, or a byte changed
        cut = draw(st.integers(0, len(body) - 1))
        body = body[:cut] + draw(st.binary(max_size=2)) + body[cut + 1 :]
        return body, None
    if kind == 21:  # every non-ASCII character escaped, and a lone surrogate ("\\ud800")
        if isinstance(message, dict) and isinstance(message.get("params"), dict):
            message["params"][draw(st.text(max_size=5))] = draw(lone_surrogates)
        return json.dumps(message, allow_nan=False).encode(), message
    return body, message


def _as_header(text: str) -> bytes | None:
    """``text`` as a header value, or None when HTTP cannot carry it as it is."""
    printable = all(" " <= c <= "~" for c in text)
    return text.encode() if printable and text == text.strip() else None


def _b64_form(text: str) -> bytes:
    return b"=?base64?" + base64.b64encode(text.encode("utf-8", "surrogatepass")) + b"?="


@st.composite
def _origin(draw: st.DrawFn) -> tuple[bytes | None, bool | None]:
    """(Origin header, whether it must be allowed, refused, or None: either)."""
    kind = draw(st.integers(0, 39))
    if kind < 32:
        return None, None
    if kind < 36:
        return draw(st.sampled_from(ALLOWED_ORIGINS)).encode(), True
    if kind < 39:
        return draw(st.sampled_from(REFUSED_ORIGINS)).encode(), False
    return draw(header_text).encode("latin-1"), None


def _authorization(draw: st.DrawFn, right: str, others: tuple[str, ...]) -> bytes | None:
    kind = draw(st.integers(0, 39))
    if kind < 35:
        return f"Bearer {right}".encode()
    if kind < 37:
        return f"Bearer {draw(st.sampled_from(others))}".encode()
    if kind == 37:
        return None
    if kind == 38:
        return f"bearer  {right} ".encode()
    return draw(header_text).encode("latin-1")


def _pick(draw: st.DrawFn, usual: bytes | None, odd: tuple[bytes | None, ...]) -> bytes | None:
    """The usual value 37 times in 40; else an odd one, or any header text."""
    kind = draw(st.integers(0, 39))
    if kind < 37:
        return usual
    if kind < 39:
        return draw(st.sampled_from(odd))
    return draw(header_text).encode("latin-1")


@st.composite
def mcp_requests(draw: st.DrawFn, keys: Keys, era: str) -> tuple[Sent, bool | None]:
    """A request to the MCP endpoint in ``era`` ("legacy" or "modern"), mostly shaped
    like that era's, and the Origin verdict it expects (see ``_origin``)."""
    modern = era == "modern"
    body, message = draw(_bodies(modern))
    method = draw(
        _mostly(st.just("POST"), st.sampled_from(("GET", "DELETE", "PUT", "OPTIONS", "PATCH")))
    )
    headers: list[Header] = []
    authorization = _authorization(
        draw, keys.agent, (keys.approval, keys.other_agent, "crk_agent_" + "A" * 40, "")
    )
    origin, origin_verdict = draw(_origin())
    rpc_method = message.get("method") if isinstance(message, dict) else None
    if modern:
        version = _pick(draw, MODERN_VERSION.encode(), (b"2099-01-01", b"2025-06-18", None))
        session = None
        method_header = _pick(
            draw, _as_header(rpc_method) if isinstance(rpc_method, str) else None, (b"ping", None)
        )
        params = message.get("params") if isinstance(message, dict) else None
        named = params.get("name") if isinstance(params, dict) else None
        name_value = None
        if isinstance(named, str):
            # Clients send a name that is not plain ASCII in the base64 form.
            plain = _as_header(named)
            name_value = _b64_form(named) if plain is None or draw(st.booleans()) else plain
        name_header = _pick(draw, name_value, (b"=?base64?!!?=", b"=?base64?//8=?=", None))
    else:
        batch = isinstance(message, list)
        version_text = draw(st.sampled_from(LEGACY_VERSIONS))
        if batch and not _rarely(draw, 4):
            version_text = "2025-03-26"
        version = _pick(draw, None, (version_text.encode(), MODERN_VERSION.encode(), b"2025-99-99"))
        fresh = (FRESH_SESSION + version_text).encode()
        needs_session = rpc_method != "initialize"
        session = _pick(
            draw, fresh if needs_session else None, (b"", b"mcp_s_" + b"A" * 60, fresh, None)
        )
        method_header = name_header = None
    accept = _pick(
        draw,
        b"application/json, text/event-stream",
        (b"application/json", b"text/event-stream", b"*/*", b"text/html", None),
    )
    content_type = _pick(
        draw,
        b"application/json",
        (b"application/json; charset=utf-8", b"text/plain", b"APPLICATION/JSON", None),
    )
    for name, value in (
        ("Authorization", authorization),
        ("Origin", origin),
        ("Content-Type", content_type),
        ("Accept", accept),
        ("MCP-Protocol-Version", version),
        ("MCP-Session-Id", session),
        ("Mcp-Method", method_header),
        ("Mcp-Name", name_header),
    ):
        if value is not None:
            headers.append((name, value))
    if _rarely(draw, 10):  # a repeated header: the gateway reads the first
        headers.append(
            (
                draw(st.sampled_from(("Authorization", "Content-Type", "Origin"))),
                draw(header_text).encode("latin-1"),
            )
        )
    opens_stream = method == "GET" or rpc_method == "subscriptions/listen"
    return Sent(
        method, MCP_PATH, tuple(headers), body if method != "GET" else b"", opens_stream
    ), origin_verdict


# --- the approval endpoints -------------------------------------------------

_STATUSES = ("pending", "approved", "denied", "expired", "executing", "completed", "failed")


@st.composite
def _approval_id(draw: st.DrawFn, known: tuple[str, ...]) -> str:
    kind = draw(st.integers(0, 9))
    if kind < 5 and known:
        return draw(st.sampled_from(known))
    if kind < 7:
        return "approval_" + draw(st.text(alphabet="0123456789abcdef", min_size=32, max_size=32))
    if kind == 7:
        return "approval_" + draw(st.text(alphabet="0123456789abcdefABCDEF\x00", max_size=40))
    return draw(st.text(min_size=1, max_size=40).filter(lambda t: t not in ("inbox", ".", "..")))


@st.composite
def _query(draw: st.DrawFn) -> str:
    pairs = []
    if draw(st.booleans()):
        pairs.append(("status", draw(st.sampled_from(_STATUSES) | st.text(max_size=10))))
    if draw(st.booleans()):
        pairs.append(("limit", draw(st.integers(-5, 300).map(str) | st.text(max_size=6))))
    if draw(st.booleans()):
        pairs.append(("cursor", draw(st.text(max_size=40))))
    if _rarely(draw, 5):
        pairs.append((draw(st.text(max_size=6)), draw(st.text(max_size=6))))
    if not pairs:
        return ""
    return "?" + "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in pairs)


@st.composite
def _decision(draw: st.DrawFn, action: str | None) -> bytes:
    kind = draw(st.integers(0, 11))
    if kind == 11:
        return draw(st.binary(max_size=200))
    if kind == 10:
        return dumps(draw(json_values))
    if kind == 9:  # over the 16 KiB bound
        return dumps({"approve": "yes", "note": "x" * 17_000})
    expected = "yes" if action == "approve" else "no"
    body: dict[str, Any] = {"approve": draw(json_scalars) if _rarely(draw, 5) else expected}
    if draw(st.booleans()):
        body["note"] = draw(
            st.text(max_size=60) | st.just("a\x00b") | st.just("n" * 2001) | json_scalars
        )
    if _rarely(draw, 10):
        body[draw(st.text(max_size=8))] = draw(json_values)
    return dumps(body)


@st.composite
def approval_requests(
    draw: st.DrawFn, keys: Keys, known: tuple[str, ...]
) -> tuple[Sent, bool | None]:
    """A request to the approval endpoints, and the Origin verdict it expects."""
    action = None
    path = APPROVALS_PATH
    shape = draw(st.integers(0, 2))
    if shape >= 1:
        path += "/" + quote(draw(_approval_id(known)), safe="")
    if shape == 2:
        action = draw(st.sampled_from(("approve", "deny")))
        path += "/" + action
    if _rarely(draw, 10):
        path += "/"
    if shape == 0:
        path += draw(_query())
    usual = "POST" if action else "GET"
    method = _pick(draw, usual.encode(), (b"GET", b"POST", b"OPTIONS", b"PUT", b"DELETE"))
    method_text = (method or b"PATCH").decode("latin-1")
    if not (method_text.isascii() and method_text.isalpha()):
        method_text = "PATCH"
    headers: list[Header] = []
    authorization = _authorization(
        draw, keys.approval, (keys.agent, keys.other_approval, "crk_approval_" + "A" * 40, "")
    )
    origin, origin_verdict = draw(_origin())
    content_type = _pick(
        draw, b"application/json", (b"text/plain", b"application/json; charset=utf-8", None)
    )
    for name, value in (
        ("Authorization", authorization),
        ("Origin", origin),
        ("Content-Type", content_type),
    ):
        if value is not None:
            headers.append((name, value))
    body = draw(_decision(action)) if method_text in ("POST", "PUT", "PATCH") else b""
    return Sent(method_text, path, tuple(headers), body), origin_verdict
