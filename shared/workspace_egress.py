"""Reading a workspace's egress policy (shared.engine.egress) from its row: for the
gateway's snapshot, the approval worker when the snapshot does not hold the
agent, and try-it (docs/architecture.md, "Egress per workspace").

The lists were validated when written; a stored entry that no longer parses
(written by hand, or by a later Crank) makes the workspace reach nothing rather
than more than it was given, and is logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import structlog

from shared.db import Connection
from shared.engine.egress import EgressPolicy

log = structlog.get_logger(__name__)

EGRESS_COLUMNS: Final = "egress_hosts, egress_grants"
REACHES_NOTHING: Final = EgressPolicy(hosts=())


def egress_from_row(row: Mapping[str, Any], workspace_id: int) -> EgressPolicy:
    """The policy of a row holding ``EGRESS_COLUMNS``."""
    try:
        return EgressPolicy.parse(row["egress_hosts"], row["egress_grants"])
    except ValueError as exc:
        log.error("egress_policy_unreadable", workspace_id=workspace_id, reason=str(exc))
        return REACHES_NOTHING


async def load_egress(conn: Connection, workspace_id: int) -> EgressPolicy:
    """One workspace's policy; a workspace that is gone reaches nothing."""
    cur = await conn.execute(
        f"SELECT {EGRESS_COLUMNS} FROM workspaces WHERE id = %s",
        (workspace_id,),
    )
    row = await cur.fetchone()
    return REACHES_NOTHING if row is None else egress_from_row(row, workspace_id)


__all__ = ["EGRESS_COLUMNS", "REACHES_NOTHING", "egress_from_row", "load_egress"]
