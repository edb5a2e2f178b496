"""The operations service as ``crank apply`` calls it: locking, savepoints, the differ."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import msgspec
import pytest

from control_plane.auth import Workspace
from control_plane.errors import Conflict, NotFound, ValidationFailed
from control_plane.etag import Precondition
from control_plane.services.operations import (
    DRAFT,
    Change,
    compare_operation,
    create_operation,
    diff_values,
    get_operation,
    publish_operation,
    update_operation_draft,
)
from control_plane.services.secrets import delete_secret, set_secret
from shared.crypto import SecretBox
from shared.db import Connection, connect
from shared.engine.spec import AuthSpec, OperationSpec, RequestSpec
from tests.support.db import TEST_SECRET_KEY, wait_until_blocked


def spec(title: str = "Get order") -> OperationSpec:
    return OperationSpec(
        name="get_order",
        title=title,
        description="Gets one order by id. Use when the user asks about a specific order.",
        input={
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "The order id"}},
            "required": ["order_id"],
        },
        request=RequestSpec(method="GET", url="https://api.example.com/orders/{order_id}"),
    )


@pytest.fixture
async def conn(database_url: str) -> AsyncIterator[Connection]:
    async with await connect(database_url) as connection:
        yield connection


async def test_concurrent_publishes_make_exactly_one_version(
    database_url: str, ws: Workspace, conn: Connection
) -> None:
    created = await create_operation(conn, ws, "setup", spec())
    await conn.commit()
    read = Precondition(created.id, 1)
    async with (
        await connect(database_url) as first,
        await connect(database_url) as second,
        await connect(database_url, autocommit=True) as watcher,
    ):
        won = await publish_operation(first, ws, "first", "get_order", read)  # holds the row lock
        waiting = asyncio.create_task(publish_operation(second, ws, "second", "get_order", read))
        await wait_until_blocked(watcher, second.info.backend_pid)
        assert not waiting.done()
        await first.commit()
        lost = await asyncio.wait_for(waiting, timeout=5)
        await second.commit()
    assert (won.version, won.changed) == (1, True)
    assert (lost.version, lost.changed) == (1, False)
    cur = await conn.execute("SELECT count(*) AS n FROM operation_versions")
    assert await cur.fetchone() == {"n": 1}


async def test_publish_waits_for_a_concurrent_delete_of_its_secret_and_then_refuses(
    database_url: str, ws: Workspace, conn: Connection
) -> None:
    needs_secret = msgspec.structs.replace(
        spec(),
        request=RequestSpec(
            method="GET",
            url="https://api.example.com/orders/{order_id}",
            auth=AuthSpec(type="bearer", secret="ORDERS"),
        ),
    )
    box = SecretBox(TEST_SECRET_KEY)
    created = await create_operation(conn, ws, "setup", needs_secret)
    await set_secret(conn, box, ws, "setup", "ORDERS", "token")
    await conn.commit()
    async with (
        await connect(database_url) as deleter,
        await connect(database_url) as publisher,
        await connect(database_url, autocommit=True) as watcher,
    ):
        await delete_secret(deleter, ws, "deleter", "ORDERS")  # deleted, not yet committed
        read = Precondition(created.id, created.revision)
        waiting = asyncio.create_task(
            publish_operation(publisher, ws, "publisher", "get_order", read)
        )
        await wait_until_blocked(watcher, publisher.info.backend_pid)
        await deleter.commit()
        with pytest.raises(ValidationFailed) as refused:
            await asyncio.wait_for(waiting, timeout=5)
        await publisher.rollback()
    assert [e.field for e in refused.value.errors] == ["request.auth.secret"]
    cur = await conn.execute("SELECT count(*) AS n FROM operation_versions")
    assert await cur.fetchone() == {"n": 0}


async def test_duplicate_create_leaves_the_callers_transaction_usable(
    ws: Workspace, conn: Connection
) -> None:
    await create_operation(conn, ws, "apply", spec())
    with pytest.raises(Conflict) as refused:
        await create_operation(conn, ws, "apply", spec("Other"))
    assert refused.value.code == "already_exists"
    row = await get_operation(conn, ws.id, "get_order")  # still inside the same transaction
    assert row is not None
    assert row.draft["title"] == "Get order"


async def test_update_without_expected_revision_skips_the_check(
    ws: Workspace, conn: Connection
) -> None:
    created = await create_operation(conn, ws, "apply", spec())
    row = await update_operation_draft(conn, ws, "apply", "get_order", spec("New"), None)
    assert row.revision == 2
    with pytest.raises(Conflict) as stale:
        await update_operation_draft(
            conn, ws, "apply", "get_order", spec("Newer"), Precondition(created.id, 1)
        )
    assert stale.value.code == "stale_revision"


async def test_operation_row_knows_whether_the_draft_differs_from_the_latest_version(
    ws: Workspace, conn: Connection
) -> None:
    created = await create_operation(conn, ws, "apply", spec())
    assert (created.latest_version, created.latest_spec, created.draft_changed) == (
        None,
        None,
        True,
    )
    await publish_operation(conn, ws, "apply", "get_order", None)
    published = await get_operation(conn, ws.id, "get_order")
    assert published is not None
    assert published.latest_version == 1
    assert published.latest_spec == published.draft
    assert published.draft_changed is False


def test_differ_reports_added_removed_and_changed_paths() -> None:
    before = {"a": 1, "list": [1, 2, 3], "gone": True, "same": {"x": [1]}}
    after = {"a": "1", "list": [1, 5], "same": {"x": [1]}, "new": None}
    assert diff_values(before, after) == [
        Change(path="a", kind="changed", before=1, after="1"),
        Change(path="list[1]", kind="changed", before=2, after=5),
        Change(path="list[2]", kind="removed", before=3, after=None),
        Change(path="gone", kind="removed", before=True, after=None),
        Change(path="new", kind="added", before=None, after=None),
    ]


def test_differ_quotes_keys_that_are_not_plain_names() -> None:
    # As an argument's path is written in an invalid_arguments error (shared child_path).
    changes = diff_values({"headers": {"X.Trace": "a"}}, {"headers": {"X.Trace": "b"}})
    assert [c.path for c in changes] == ["headers['X.Trace']"]


def test_differ_tells_true_from_one() -> None:
    assert diff_values({"v": True}, {"v": 1}) == [
        Change(path="v", kind="changed", before=True, after=1)
    ]


def test_differ_against_nothing_is_one_whole_value_change() -> None:
    assert diff_values(None, {"a": 1}) == [
        Change(path="", kind="added", before=None, after={"a": 1})
    ]


async def test_any_two_versions_or_the_draft_are_compared_in_either_direction(
    ws: Workspace, conn: Connection
) -> None:
    row = await create_operation(conn, ws, "t", spec())
    await publish_operation(conn, ws, "t", "get_order", None)
    row = await update_operation_draft(conn, ws, "t", "get_order", spec("Second"), None)
    await publish_operation(conn, ws, "t", "get_order", None)
    await update_operation_draft(conn, ws, "t", "get_order", spec("Third"), None)

    older = await compare_operation(conn, ws, "get_order", 1, 2)
    assert older.changes == [
        Change(path="title", kind="changed", before="Get order", after="Second")
    ]
    back = await compare_operation(conn, ws, "get_order", DRAFT, 1)
    assert back.changes == [Change(path="title", kind="changed", before="Third", after="Get order")]
    assert (await compare_operation(conn, ws, "get_order", 2, 2)).changes == []
    assert back.revision == row.revision + 1
    with pytest.raises(NotFound):
        await compare_operation(conn, ws, "get_order", 1, 3)
    with pytest.raises(NotFound):
        await compare_operation(conn, ws, "no_such_operation", 1, DRAFT)
