"""Optimistic concurrency: every editable resource has a revision, exposed as an ETag.

Writes must send ``If-Match`` with the ETag they read: none gets 428, a stale
one 409 — never a silent overwrite.
"""

from __future__ import annotations

from typing import Any

from litestar import Request

from control_plane.errors import Conflict, PreconditionRequired


def etag(revision: int) -> str:
    return f'"r{revision}"'


def parse_if_match(request: Request[Any, Any, Any]) -> int:
    """The revision the client based its write on; 428 if it sent none."""
    header = request.headers.get("if-match")
    if not header:
        raise PreconditionRequired(
            "this write needs an If-Match header with the resource's ETag (read it first)"
        )
    value = header.strip().removeprefix("W/")
    if value.startswith('"r') and value.endswith('"') and value[2:-1].isdigit():
        return int(value[2:-1])
    raise PreconditionRequired(f"If-Match {header!r} is not an ETag Crank issued")


def check_revision(expected: int, current: int, what: str) -> None:
    """409 when the client's revision is not the current one."""
    if expected != current:
        raise Conflict(
            f"{what} changed since you read it (you have {etag(expected)}, current is "
            f"{etag(current)}); read it again and reapply your change",
            code="stale_revision",
        )
