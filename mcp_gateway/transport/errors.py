"""The one error type of the gateway's HTTP transport, raised anywhere, rendered once.

Every refusal of the MCP endpoint and of the approval-key endpoints (a bad
Origin or key, an unpublished agent, a malformed request, a rate limit, an
unknown session or approval) raises ``ProtocolError``; the top of each
handler renders it in its endpoint's shape, like the MCP SDK's ``MCPError``:

- the MCP endpoint: a JSON-RPC error response (``jsonrpc_body``), or no body
  at all when ``code`` is None (a 405 carries only ``Allow``);
- the approval-key endpoints: ``{"code": name, "message": ...}`` like the
  admin API's errors, plus the fields of ``data`` (``problem_body``).

Tool failures are not protocol errors: they are tool results with
``isError: true`` (shared.engine.errors). The status each refusal gets, and in
which order the checks run, is in docs/architecture.md, "Status precedence".
"""

from __future__ import annotations

from typing import Any

from mcp_gateway.vocabulary.jsonrpc import REFUSED, RequestId, encode, error
from shared.http_errors import http_error_name


class ProtocolError(Exception):
    """A refusal: HTTP status, JSON-RPC code, message, and what the answer carries.

    ``code``: the JSON-RPC error code (default ``REFUSED``, -32001, for the
    checks before any JSON-RPC: Origin, key, agent); None answers no body.
    ``name``: the approval endpoints' error code (default by status).
    ``data``: JSON-RPC ``error.data``; on the approval endpoints, extra fields.
    ``headers``: added to the answer (``Retry-After``, ``WWW-Authenticate``, ``Allow``).
    ``rpc_id``: the id of the JSON-RPC request refused, once known.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        code: int | None = REFUSED,
        name: str | None = None,
        data: Any = None,
        headers: dict[str, str] | None = None,
        rpc_id: RequestId | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.name = name or http_error_name(status, "error")  # a raise site may name its own
        self.data = data
        self.headers = headers
        self.rpc_id = rpc_id

    def jsonrpc_body(self) -> bytes:
        """The MCP endpoint's answer body: a JSON-RPC error response (empty when no code)."""
        if self.code is None:
            return b""
        return encode(error(self.rpc_id, self.code, self.message, self.data))

    def problem_body(self) -> bytes:
        """The approval endpoints' answer body: ``{"code", "message", ...data}``."""
        extra = self.data if isinstance(self.data, dict) else {}
        return encode({"code": self.name, "message": self.message, **extra})


class MethodError(Exception):
    """A JSON-RPC error answer to one method (mcp_gateway.transport.methods): inside HTTP
    200 in the 2025 era, with ``status`` in the 2026-07-28 era (200 keeps it in a 200)."""

    def __init__(self, code: int, message: str, *, data: Any = None, status: int = 200) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data
        self.status = status
