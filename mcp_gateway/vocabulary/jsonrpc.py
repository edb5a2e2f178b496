"""JSON-RPC 2.0 framing: parse one message or a batch, build results and errors.

MCP messages are parsed leniently (unknown fields and ``_meta`` are kept and
ignored) because every protocol revision adds some; only the JSON-RPC frame
itself is checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from shared.json_depth import nests_deeper_than

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
HEADER_MISMATCH = -32020  # 2026-07-28: Mcp-Method / Mcp-Name disagree with the body
MISSING_CAPABILITY = -32021  # 2026-07-28: the request needs a client capability not declared
UNSUPPORTED_VERSION = -32022  # 2026-07-28: protocol version not supported
REFUSED = -32001  # Crank's own: refused before any JSON-RPC (Origin, key, agent)
RATE_LIMITED_CODE = -32029  # Crank's own, with HTTP 429 (docs/architecture.md, "Status precedence")

MAX_DEPTH = 64  # arrays and objects in one message, its own object included

_encoder = msgspec.json.Encoder()
_decoder = msgspec.json.Decoder()

RequestId = str | int


@dataclass(frozen=True, slots=True)
class Message:
    """One JSON-RPC message from the client."""

    method: str | None  # None for a response to a server request
    id: RequestId | None  # None for a notification
    params: dict[str, Any]
    is_request: bool

    @property
    def meta(self) -> dict[str, Any]:
        meta = self.params.get("_meta")
        return meta if isinstance(meta, dict) else {}


class InvalidMessage(ValueError):
    """Not a JSON-RPC 2.0 message; ``request_id`` when one could be read, for the error."""

    def __init__(self, message: str, request_id: RequestId | None = None) -> None:
        super().__init__(message)
        self.request_id = request_id


def decode(body: bytes) -> Any:
    """The JSON value; raises msgspec.DecodeError for malformed JSON, and for JSON nested
    deeper than ``MAX_DEPTH`` (shared.json_depth)."""
    if nests_deeper_than(body, MAX_DEPTH):
        raise msgspec.DecodeError(f"JSON nested deeper than {MAX_DEPTH} levels")
    try:
        return _decoder.decode(body)
    except RecursionError:  # unreachable below MAX_DEPTH; kept so depth is never a 500
        raise msgspec.DecodeError("JSON nested too deeply") from None


def encode(value: Any) -> bytes:
    return _encoder.encode(value)


def parse_message(value: Any) -> Message:
    """One decoded message checked as a JSON-RPC frame; raises InvalidMessage."""
    if not isinstance(value, dict) or value.get("jsonrpc") != "2.0":
        raise InvalidMessage('not a JSON-RPC 2.0 message (needs "jsonrpc": "2.0")')
    raw_id = value.get("id")
    if raw_id is not None and (isinstance(raw_id, bool) or not isinstance(raw_id, str | int)):
        raise InvalidMessage("id must be a string or an integer")
    request_id: RequestId | None = raw_id
    method = value.get("method")
    if method is None:
        if "result" in value or "error" in value:
            # A response keeps its result or error in params (an elicitation answer).
            answer = {k: value[k] for k in ("result", "error") if k in value}
            return Message(method=None, id=request_id, params=answer, is_request=False)
        raise InvalidMessage("a message needs a method, a result or an error", request_id)
    if not isinstance(method, str) or not method:
        raise InvalidMessage("method must be a non-empty string", request_id)
    params = value.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        raise InvalidMessage("params must be an object", request_id)
    return Message(method=method, id=request_id, params=params, is_request=request_id is not None)


def result(request_id: RequestId | None, value: Any) -> dict[str, Any]:
    """A JSON-RPC success response carrying ``value``."""
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(
    request_id: RequestId | None, code: int, message: str, data: Any = None
) -> dict[str, Any]:
    """A JSON-RPC error response; ``data`` is left out when None."""
    err: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        err["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": err}
