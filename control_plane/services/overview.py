"""A workspace at a glance: what the console's overview page shows."""

from __future__ import annotations

import msgspec

from shared.db import Connection


class Overview(msgspec.Struct, kw_only=True):
    agents: int
    agents_published: int
    operations: int
    operations_published: int
    calls_last_hour: dict[str, int]  # outcome ("ok" or an error code) -> calls
    pending_approvals: int


async def workspace_overview(conn: Connection, workspace_id: int) -> Overview:
    cur = await conn.execute(
        """SELECT
             (SELECT count(*) FROM agents WHERE workspace_id = %(ws)s) AS agents,
             (SELECT count(*) FROM agents WHERE workspace_id = %(ws)s
                 AND published IS NOT NULL) AS agents_published,
             (SELECT count(*) FROM operations WHERE workspace_id = %(ws)s) AS operations,
             (SELECT count(*) FROM operations WHERE workspace_id = %(ws)s
                 AND latest_version IS NOT NULL) AS operations_published,
             (SELECT count(*) FROM approvals WHERE workspace_id = %(ws)s
                 AND status = 'pending') AS pending_approvals""",
        {"ws": workspace_id},
    )
    counts = await cur.fetchone()
    assert counts is not None
    cur = await conn.execute(
        """SELECT outcome, count(*) AS calls FROM call_log
            WHERE workspace_id = %s AND called_at > now() - interval '1 hour'
            GROUP BY outcome ORDER BY count(*) DESC, outcome""",
        (workspace_id,),
    )
    return Overview(
        agents=counts["agents"],
        agents_published=counts["agents_published"],
        operations=counts["operations"],
        operations_published=counts["operations_published"],
        calls_last_hour={row["outcome"]: row["calls"] for row in await cur.fetchall()},
        pending_approvals=counts["pending_approvals"],
    )
