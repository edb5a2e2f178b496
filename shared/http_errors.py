"""Error names by HTTP status, for the ``{"code", "message"}`` bodies both processes send.

The admin API (control_plane.errors) and the gateway's approval endpoints
(mcp_gateway.transport.errors) answer in the same shape, so a client sees
the same ``code`` for the same status from either.
"""

from __future__ import annotations

from collections.abc import Mapping

HTTP_ERROR_NAMES: Mapping[int, str] = {
    400: "bad_request",
    401: "unauthorized",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "body_too_large",
    415: "unsupported_media_type",
    429: "rate_limited",
    500: "internal_error",
    503: "unavailable",
}


def http_error_name(status: int, default: str = "http_error") -> str:
    """The error name a ``{"code", "message"}`` body carries for ``status``."""
    return HTTP_ERROR_NAMES.get(status, default)
