"""Optimistic concurrency: every editable resource has a revision, exposed as an ETag.

The ETag is ``"<id>.r<revision>"``: the row id makes it name one incarnation of
the resource, so an ETag read before a delete never matches the resource
created again under the same name (which starts over at revision 1).

Writes must send ``If-Match`` with the ETag they read: none gets 428, a stale
one 409 — never a silent overwrite.
"""

from __future__ import annotations

import re
from typing import NamedTuple

from litestar.datastructures import ResponseHeader

from control_plane.errors import Conflict, PreconditionRequired

# Bounded digits: the values are compared in Python only, but int() of a
# 5000-digit string raises.
_ETAG = re.compile(r'(?:W/)?"(\d{1,19})\.r(\d{1,9})"')
ETAG_PATTERN = f"^{_ETAG.pattern}$"  # what the document says If-Match and ETag hold
# Declared on each handler that sends it (``response_headers=[ETAG_HEADER]``); the
# handler sets the value, this only documents it (control_plane.api_document).
ETAG_HEADER = ResponseHeader(
    name="ETag",
    documentation_only=True,
    description='The resource\'s ETag, `"<id>.r<revision>"`: send it back as `If-Match`.',
)


class Precondition(NamedTuple):
    """What an ``If-Match`` names: one incarnation (row id) at one revision."""

    id: int
    revision: int


def etag(resource_id: int, revision: int) -> str:
    """``"<id>.r<revision>"``: names one incarnation of a resource, at one revision."""
    return f'"{resource_id}.r{revision}"'


def parse_if_match(header: str | None) -> Precondition:
    """The resource and revision an ``If-Match`` header names; 428 if there is none."""
    if not header:
        raise PreconditionRequired(
            "this write needs an If-Match header with the resource's ETag (read it first)"
        )
    match = _ETAG.fullmatch(header.strip())
    if match is None:
        raise PreconditionRequired(f"If-Match {header!r} is not an ETag Crank issued")
    return Precondition(int(match.group(1)), int(match.group(2)))


def check_revision(expected: Precondition, resource_id: int, revision: int, what: str) -> None:
    """409 when the client's ETag is not the current one of this very resource."""
    current = etag(resource_id, revision)
    if expected.id != resource_id:
        raise Conflict(
            f"{what} was deleted and created again since you read it (you have "
            f"{etag(*expected)}, current is {current}); read it again and reapply your change",
            code="stale_revision",
        )
    if expected.revision != revision:
        raise Conflict(
            f"{what} changed since you read it (you have {etag(*expected)}, current is "
            f"{current}); read it again and reapply your change",
            code="stale_revision",
        )
