"""Request ids for the call log and error reports: ``req_`` + 16 hex digits.

One generator per process, shared by the MCP endpoint and the approval worker
(an approved call's run gets its own id, like any tools/call).
"""

from __future__ import annotations

import os
import secrets

_COUNTER_SPAN = 1 << 32


class RequestIds:
    """``req_`` + 16 hex digits: a random per-process prefix (8) and a counter (8).

    Cheaper than ``secrets.token_hex`` per request. Ids are not secrets: they
    only need to be unique across replicas for the call log and error reports.
    A new prefix is drawn when the counter wraps and in a forked child.
    """

    def __init__(self) -> None:
        self._prefix = ""
        self._next = _COUNTER_SPAN  # draws a prefix on first use

    def new(self) -> str:
        if self._next >= _COUNTER_SPAN:
            self._prefix = "req_" + secrets.token_hex(4)
            self._next = 0
        value = self._next
        self._next = value + 1
        return f"{self._prefix}{value:08x}"

    def reset(self) -> None:
        self._next = _COUNTER_SPAN


_request_ids = RequestIds()
new_request_id = _request_ids.new
os.register_at_fork(after_in_child=_request_ids.reset)
