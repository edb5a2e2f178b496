"""A workspace's current secrets and egress policy for work done outside a request
(the approval worker, the webhook deliverer): the snapshot's when it holds the
agent, else read from the database (shared.secrets, shared.workspace_egress), as
an agent that is new, unpublished or moved may not be in the snapshot yet."""

from __future__ import annotations

from collections.abc import Callable, Mapping

from psycopg_pool import AsyncConnectionPool

from mcp_gateway.catalog.snapshot import Snapshot
from shared.crypto import SecretBox
from shared.db import Connection
from shared.engine.egress import EgressPolicy
from shared.secrets import load_secrets
from shared.workspace_egress import load_egress


class WorkspaceState:
    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        snapshot: Callable[[], Snapshot],
        box: SecretBox | None,
    ) -> None:
        self._pool = pool
        self._snapshot = snapshot
        self._box = box

    async def secrets(self, agent_id: int, workspace_id: int) -> Mapping[str, str]:
        """The workspace's secrets, opened; none without a ``SecretBox``."""
        agent = self._snapshot().agents_by_id.get(agent_id)
        if agent is not None and agent.published and agent.workspace_id == workspace_id:
            return agent.secrets
        if self._box is None:
            return {}
        async with self._pool.connection() as conn:
            return await load_secrets(conn, self._box, workspace_id)

    async def egress(self, agent_id: int, workspace_id: int) -> EgressPolicy:
        """The workspace's egress policy."""
        agent = self._snapshot().agents_by_id.get(agent_id)
        if agent is not None and agent.workspace_id == workspace_id:
            return agent.egress
        async with self._pool.connection() as conn:
            return await load_egress(conn, workspace_id)
