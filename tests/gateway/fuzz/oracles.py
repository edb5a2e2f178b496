"""What every answer of a fuzzed gateway must be, whatever was sent.

Each ``check_*`` raises ``Violation`` (an AssertionError, so Hypothesis shrinks
it) naming the rule broken, and otherwise returns the answer's outcome as a
short label ("200 result", "400 -32600", "200 tool invalid_arguments") that
the long run counts. The rules are the documented ones
(docs/mcp-interface.md, "Status codes and errors", "Errors of the approvals
endpoints", "Browsers (CORS)", "Tool errors"; docs/architecture.md,
"Status precedence"): no 5xx, no traceback or exception repr in a body, every
MCP refusal a well-formed JSON-RPC 2.0 error whose id echoes the request's or
is null, every approvals refusal ``{"code", "message"}`` with the code of its
status, a 401 with ``WWW-Authenticate: Bearer``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from shared.engine.errors import ERROR_CODES
from tests.gateway.fuzz.wire import Answer, Sent
from tests.support.processes import largest_descendant, memory_kib

# docs/mcp-interface.md, "Status codes and errors": each status and the JSON-RPC
# codes it may carry (None: no body at all).
MCP_ERRORS: dict[int, frozenset[int | None]] = {
    400: frozenset({-32700, -32600, -32602, -32020, -32021, -32022}),
    401: frozenset({-32001}),
    403: frozenset({-32001}),
    404: frozenset({-32001, -32600, -32601}),
    405: frozenset({None}),
    408: frozenset({-32600}),  # a body that trickled or stopped (transport.body_reads)
    413: frozenset({-32600}),
    429: frozenset({-32029}),
}
# JSON-RPC errors inside HTTP 200 (an unknown method or tool, a bad cursor, a
# batch item refused or not run).
IN_BATCH_OR_200 = frozenset({-32600, -32601, -32602})
NO_SUCH_PATH = b'{"code":"not_found","message":"no such path"}'  # mcp_gateway.app
# docs/mcp-interface.md, "Errors of the approvals endpoints".
APPROVAL_ERRORS = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "not_pending",
    413: "body_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
}
# docs/mcp-interface.md, "Tool errors": the closed list, kept in one place.
TOOL_ERROR_CODES = frozenset(ERROR_CODES)
TOOL_ERROR_FIELDS = frozenset(
    {"error_code", "message", "recoverable", "suggested_action", "request_id"}
)
# The optional fields: retry_after_s on a "later" error; confirmation_required's token.
_OPTIONAL_FIELDS = {
    code: {"retry_after_s"} | ({"confirmation_token"} if code == "confirmation_required" else set())
    for code in ERROR_CODES
}
# What leaks of a crash: a traceback, a frame, an exception's or an object's repr.
_CRASH = re.compile(
    rb"Traceback \(most recent call last\)|File \"[^\"]*\.py\", line \d"
    rb"|\b[A-Z]\w*(?:Error|Exception)\((?:'|\"|\))|<\w+(?:\.\w+)* object at 0x"
)


class Violation(AssertionError):
    """An answer that breaks a documented rule."""


def expect(condition: bool, rule: str, sent: Sent, answer: Answer) -> None:
    if not condition:
        raise Violation(
            f"{rule}\n  sent: {sent.method} {sent.path} {list(sent.headers)!r}\n"
            f"  body: {sent.body[:600]!r}\n  got: {answer.status} {answer.headers!r}\n"
            f"  answer: {answer.body[:1200]!r}"
        )


def check_common(sent: Sent, answer: Answer) -> None:
    """Every endpoint: below 500, and nothing of a crash in the body (unless the
    request itself carried those words, which an error may quote)."""
    expect(answer.status < 500, "a 5xx answer", sent, answer)
    crash = _CRASH.search(answer.body)
    echoed = crash is not None and crash.group(0) in sent.body + sent.path.encode()
    expect(crash is None or echoed, "a traceback or exception repr in the body", sent, answer)


def _json(sent: Sent, answer: Answer) -> Any:
    try:
        return json.loads(answer.body)
    except ValueError:
        raise Violation(f"not JSON: {answer.body[:300]!r} for {sent.body[:300]!r}") from None


def request_id(body: bytes) -> tuple[bool, Any]:
    """(whether the body is one JSON object with a valid id, that id)."""
    try:
        value = json.loads(body)
    except (ValueError, RecursionError):
        return False, None
    if not isinstance(value, dict):
        return False, None
    raw = value.get("id")
    valid = isinstance(raw, str | int) and not isinstance(raw, bool)
    return valid, raw if valid else None


def _rpc_error(error: Any, sent: Sent, answer: Answer) -> int:
    expect(isinstance(error, dict), "error is not an object", sent, answer)
    code, message = error.get("code"), error.get("message")
    expect(isinstance(code, int) and not isinstance(code, bool), "error.code not int", sent, answer)
    expect(isinstance(message, str) and bool(message), "error.message not a string", sent, answer)
    expect(set(error) <= {"code", "message", "data"}, "extra error fields", sent, answer)
    return int(code)


def _rpc_response(message: Any, sent: Sent, answer: Answer) -> tuple[str, Any]:
    """("result", value) or ("error", code) of one JSON-RPC response, checked."""
    expect(isinstance(message, dict), "a JSON-RPC response is not an object", sent, answer)
    expect(message.get("jsonrpc") == "2.0", 'no "jsonrpc": "2.0"', sent, answer)
    expect("id" in message, "a response without id", sent, answer)
    rid = message["id"]
    expect(
        rid is None or (isinstance(rid, str | int) and not isinstance(rid, bool)),
        "a response id neither null, string nor integer",
        sent,
        answer,
    )
    if "error" in message:
        expect(set(message) == {"jsonrpc", "id", "error"}, "error and more", sent, answer)
        return "error", _rpc_error(message["error"], sent, answer)
    expect(set(message) == {"jsonrpc", "id", "result"}, "neither result nor error", sent, answer)
    return "result", message["result"]


def _tool_outcome(result: Any, sent: Sent, answer: Answer) -> str:
    """The outcome of a tools/call result: "tool ok" or "tool <error_code>"."""
    if not isinstance(result, dict) or "isError" not in result:
        return "result"
    if result["isError"] is not True:
        return "tool ok"
    error = result.get("structuredContent")
    if not isinstance(error, dict):
        raise Violation(f"a tool error without structuredContent: {answer.body[:500]!r}")
    expect(error.get("error_code") in TOOL_ERROR_CODES, "an undocumented error_code", sent, answer)
    allowed = TOOL_ERROR_FIELDS | _OPTIONAL_FIELDS[error["error_code"]]
    expect(
        TOOL_ERROR_FIELDS <= set(error) <= allowed,
        "tool error fields",
        sent,
        answer,
    )
    return f"tool {error['error_code']}"


def _sse_messages(sent: Sent, answer: Answer) -> list[Any]:
    data = [line[5:].strip() for line in answer.body.split(b"\n") if line.startswith(b"data:")]
    expect(bool(data), "an SSE answer without an event", sent, answer)
    return [json.loads(item) for item in data]


def check_mcp(sent: Sent, answer: Answer) -> str:
    """An answer of the MCP endpoint; its outcome label."""
    check_common(sent, answer)
    status = answer.status
    if status in (202, 204):
        expect(answer.body == b"", f"a {status} with a body", sent, answer)
        return str(status)
    if status == 200:
        return _mcp_success(sent, answer)
    expect(status in MCP_ERRORS, f"undocumented status {status}", sent, answer)
    if status == 401:
        expect(answer.header("www-authenticate") == "Bearer", "401 without Bearer", sent, answer)
    if status == 429:
        expect(answer.header("retry-after") is not None, "429 without Retry-After", sent, answer)
    if status == 405:
        expect(answer.body == b"" and bool(answer.header("allow")), "405 shape", sent, answer)
        return "405"
    expect(
        (answer.header("content-type") or "").startswith("application/json"),
        "an error that is not application/json",
        sent,
        answer,
    )
    kind, code = _rpc_response(_json(sent, answer), sent, answer)
    expect(kind == "error", f"a {status} carrying a result", sent, answer)
    expect(code in MCP_ERRORS[status], f"code {code} is not documented for {status}", sent, answer)
    has_id, rid = request_id(sent.body)
    got = json.loads(answer.body)["id"]
    expect(got is None or (has_id and got == rid), "the error id does not echo", sent, answer)
    return f"{status} {code}"


def _mcp_success(sent: Sent, answer: Answer) -> str:
    content_type = answer.header("content-type") or ""
    if answer.streamed:
        expect(content_type.startswith("text/event-stream"), "a stream not SSE", sent, answer)
        return "200 stream"
    if content_type.startswith("text/event-stream"):
        messages = _sse_messages(sent, answer)
        final = messages[-1]  # notifications (progress) may come first
    else:
        expect(content_type.startswith("application/json"), "200 not JSON", sent, answer)
        final = _json(sent, answer)
    if isinstance(final, list):  # a batch: one answer per request, ids echoed
        expect(bool(final), "an empty batch answer", sent, answer)
        codes = []
        for item in final:
            kind, value = _rpc_response(item, sent, answer)
            if kind == "error":
                expect(value in IN_BATCH_OR_200, f"batch item code {value}", sent, answer)
            codes.append(kind)
        return "200 batch"
    kind, value = _rpc_response(final, sent, answer)
    has_id, rid = request_id(sent.body)
    expect(has_id and final["id"] == rid, "a 200 answer whose id does not echo", sent, answer)
    if kind == "error":
        expect(value in IN_BATCH_OR_200, f"code {value} inside 200", sent, answer)
        return f"200 {value}"
    return "200 " + _tool_outcome(value, sent, answer)


def check_approvals(sent: Sent, answer: Answer, origin_allowed: bool | None) -> str:
    """An answer of the approval endpoints. ``origin_allowed``: whether the request's
    Origin must be allowed (True), refused (False), or either (None: no rule for it)."""
    check_common(sent, answer)
    status = answer.status
    if answer.body == NO_SUCH_PATH:  # an id holding "/" (%2F) makes a path of no endpoint
        expect(status == 404, "no such path, not 404", sent, answer)
        return "404 no such path"
    expect(answer.header("vary") == "Origin", "no Vary: Origin", sent, answer)
    origin = sent.header("origin")
    allow_origin = answer.header("access-control-allow-origin")
    if allow_origin is not None:
        expect(
            origin is not None and allow_origin == origin.decode("latin-1"),
            "CORS names another origin",
            sent,
            answer,
        )
    if origin_allowed is True:
        expect(allow_origin is not None, "an allowed Origin without CORS headers", sent, answer)
    if origin_allowed is False:
        expect(status == 403 and allow_origin is None, "a foreign Origin let in", sent, answer)
    if status == 204:
        expect(sent.method == "OPTIONS" and answer.body == b"", "204 shape", sent, answer)
        expect(bool(answer.header("allow")), "a preflight without Allow", sent, answer)
        return "204"
    if status == 200:
        body = _json(sent, answer)
        expect(isinstance(body, dict), "200 not an object", sent, answer)
        shape = "items" in body or ("id" in body and "status" in body)
        expect(shape, "200 neither a page nor a record", sent, answer)
        return "200"
    expect(status in APPROVAL_ERRORS, f"undocumented status {status}", sent, answer)
    body = _json(sent, answer)
    expect(isinstance(body, dict), "an error body not an object", sent, answer)
    expect(body.get("code") == APPROVAL_ERRORS[status], "error code of status", sent, answer)
    expect(isinstance(body.get("message"), str), "an error without message", sent, answer)
    if status == 401:
        expect(answer.header("www-authenticate") == "Bearer", "401 without Bearer", sent, answer)
    if status == 405:
        expect(bool(answer.header("allow")), "405 without Allow", sent, answer)
    return f"{status} {body['code']}"


def worker_rss_mib(granian_pid: int) -> tuple[float, float]:
    """(RSS now, its peak) of the gateway's app worker (VmRSS, VmHWM), in MiB."""
    rss, peak = memory_kib(largest_descendant(granian_pid))
    return rss / 1024, peak / 1024
