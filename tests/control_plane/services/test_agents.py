"""The agents service under concurrency: what a write checked still holds at its commit."""

from __future__ import annotations

import asyncio

import pytest

from control_plane.auth import Workspace
from control_plane.errors import ValidationFailed
from control_plane.services.agents import create_agent
from control_plane.services.operations import create_operation, discard_draft
from shared.db import connect
from shared.engine.spec import AgentSpec, OperationSpec, RequestSpec
from tests.support.db import wait_until_blocked


def operation() -> OperationSpec:
    return OperationSpec(
        name="get_order",
        description="Gets one order by id. Use when the user asks about a specific order.",
        input={
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "The order id"}},
            "required": ["order_id"],
        },
        request=RequestSpec(method="GET", url="https://api.example.com/orders/{order_id}"),
    )


async def test_binding_waits_for_a_concurrent_delete_of_the_operation_and_then_refuses(
    database_url: str, ws: Workspace
) -> None:
    async with await connect(database_url) as setup:
        await create_operation(setup, ws, "setup", operation())  # never published
        await setup.commit()
    async with (
        await connect(database_url) as discarder,
        await connect(database_url) as binder,
        await connect(database_url, autocommit=True) as watcher,
    ):
        discarded = await discard_draft(discarder, ws, "discarder", "get_order", None)
        assert discarded.deleted  # the row is gone once this commits
        spec = AgentSpec(slug="orders", operations=["get_order"])
        waiting = asyncio.create_task(create_agent(binder, ws, "binder", spec))
        await wait_until_blocked(watcher, binder.info.backend_pid)
        await discarder.commit()
        with pytest.raises(ValidationFailed) as refused:
            await asyncio.wait_for(waiting, timeout=5)
        await binder.rollback()
        cur = await watcher.execute("SELECT count(*) AS n FROM agents")
        assert await cur.fetchone() == {"n": 0}
    assert [e.field for e in refused.value.errors] == ["operations[0]"]
