"""Whether this process reaches its database, as the snapshot poll last found it.

The refresher (mcp_gateway.catalog.refresher) polls on a connection of its own
and reports here; the key look-up, a session's end, ``/readyz`` and the
metrics read it (docs/architecture.md, "Database outages").
"""

from __future__ import annotations

import time

import structlog

log = structlog.get_logger(__name__)


class DatabaseHealth:
    """The last poll's answer: ``reachable``, and when the last good one was."""

    def __init__(self) -> None:
        self.reachable = False
        self.last_success = 0.0  # time.monotonic() of the last good poll

    def succeeded(self, snapshot_version: int) -> None:
        self.last_success = time.monotonic()
        if not self.reachable:
            self.reachable = True
            log.info("database_reachable", snapshot_version=snapshot_version)

    def failed(self, error: BaseException, *, report: bool) -> None:
        """An unreachable database; logged when it was reachable before (or ``report``)."""
        if self.reachable or report:
            log.warning("database_unreachable", error=str(error) or type(error).__name__)
        self.reachable = False
