"""The approval worker in this process against the real database: claiming,
leases, fencing, attempts, shutdown and waking, each interleaving forced
(held transactions, a held upstream, leases expired by UPDATE, never by
sleeping). The upstream shop and the approved rows come from
tests/support/approvals.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from mcp_gateway.approvals import store
from mcp_gateway.approvals.execution import UPSTREAM_TEXT_CHARS, same_request
from mcp_gateway.approvals.worker import ApprovalWorker
from mcp_gateway.catalog.builder import load_snapshot
from mcp_gateway.catalog.snapshot import Snapshot, SnapshotOptions
from mcp_gateway.upkeep.call_log import CallLogWriter
from mcp_gateway.upkeep.notifications import Notifications
from shared.crypto import SecretBox
from shared.db import Connection, connect, open_pool
from shared.engine.outbound import UpstreamExecutor
from shared.engine.request_builder import BuiltRequest
from shared.engine.ssrf import AddressPolicy
from shared.principals import PrincipalRecord
from tests.support.api import Client, auth
from tests.support.approvals import (
    TOKEN,
    Shop,
    execute,
    expire_lease,
    fetch,
    insert_approved,
    publish_shop,
    status_is,
)
from tests.support.db import TEST_SECRET_KEY
from tests.support.gateway import wait_until
from tests.support.processes import free_port
from tests.support.tool_calls import BASE, ok


async def set_secret(client: Client, admin: str, value: str) -> None:
    await ok(
        await client.put(f"{BASE}/secrets/SHOP_TOKEN", json={"value": value}, headers=auth(admin))
    )


@asynccontextmanager
async def worker_for(
    database_url: str,
    *,
    owner: str = "worker-a",
    start: bool = False,
    snapshot: Snapshot | None = None,
    call_log: CallLogWriter | None = None,
    **options: Any,
) -> AsyncIterator[ApprovalWorker]:
    pool = await open_pool(database_url, autocommit=True, max_size=4, name=owner)
    executor = UpstreamExecutor(
        AddressPolicy.from_settings(allow_private_upstreams=True, upstream_allowlist=())
    )
    await executor.start()
    current = snapshot or Snapshot.empty()
    worker = ApprovalWorker(
        pool,
        executor,
        owner=owner,
        snapshot=lambda: current,
        box=SecretBox(TEST_SECRET_KEY),
        call_log=call_log or CallLogWriter(pool),  # never flushed unless the test does
        **options,
    )
    if start:
        worker.start()
    try:
        yield worker
    finally:
        await worker.stop(grace_s=0)
        await executor.close()
        await pool.close()


async def idle(worker: ApprovalWorker) -> bool:
    return worker.in_hand == 0  # every claimed row is done with


# -- performing the stored request ---------------------------------------------


async def test_approved_call_sends_the_stored_request_and_records_the_selected_result(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    (approval_id,) = await insert_approved(database_url)
    async with worker_for(database_url) as worker:
        assert await worker.claim_once() == 1
        await wait_until(lambda: idle(worker), timeout_s=10)

    row = await fetch(database_url, approval_id)
    assert row["status"] == "completed"
    assert row["attempt"] == 1
    assert row["lease_owner"] == "worker-a"
    assert row["completed_at"] is not None
    assert row["response_payload"] == {"id": "ord-1", "item": row["response_payload"]["item"]}
    # The secret masked in the stored request was decrypted again for the call;
    # the idempotency argument travels in its header, not in the body.
    (seen,) = shop.seen
    assert seen.authorization == f"Bearer {TOKEN}"
    assert seen.key is not None
    assert seen.key.startswith("req-")
    assert seen.body == {"item": row["response_payload"]["item"]}


async def test_an_approved_call_a_person_asked_for_is_logged_under_their_name(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    """The claim reads the requester back from the row: the run's call log row names
    the person (docs/architecture.md, "Identity"), as the asking call's row did."""
    await publish_shop(client, admin_token, shop.port)
    dana = PrincipalRecord(
        issuer="https://idp.example.com", subject="dana", name="Dana Ng", client_id="desk"
    )
    (approval_id,) = await insert_approved(database_url, person=dana)
    log_pool = await open_pool(database_url, autocommit=True, max_size=1, name="log")
    call_log = CallLogWriter(log_pool)
    try:
        async with worker_for(database_url, call_log=call_log) as worker:
            assert await worker.claim_once() == 1
            await wait_until(lambda: idle(worker), timeout_s=10)
        assert await call_log.flush() == 1
    finally:
        await log_pool.close()
    async with await connect(database_url) as conn:
        cur = await conn.execute(
            """SELECT key_id, principal_issuer, principal_subject, principal_name, client_id,
                      outcome FROM call_log WHERE approval_id = %s""",
            (approval_id,),
        )
        logged = await cur.fetchall()
    assert logged == [
        {
            "key_id": None,
            "principal_issuer": "https://idp.example.com",
            "principal_subject": "dana",
            "principal_name": "Dana Ng",
            "client_id": "desk",
            "outcome": "ok",
        }
    ]


async def test_secrets_come_from_the_snapshot_when_it_holds_the_agent(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    async with await connect(database_url, autocommit=True) as conn:
        snapshot = await load_snapshot(conn, SnapshotOptions(box=SecretBox(TEST_SECRET_KEY)))
    # The database moves on; the worker's snapshot still holds the old value.
    await set_secret(client, admin_token, "rotated-token-1")
    await insert_approved(database_url)
    async with worker_for(database_url, snapshot=snapshot) as worker:
        await worker.claim_once()
        await wait_until(lambda: idle(worker), timeout_s=10)
    assert [s.authorization for s in shop.seen] == [f"Bearer {TOKEN}"]


async def test_a_rotated_secret_still_matches_the_stored_masked_request(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    (approval_id,) = await insert_approved(database_url)
    await set_secret(client, admin_token, "rotated-token-2")
    async with worker_for(database_url) as worker:
        await worker.claim_once()
        await wait_until(lambda: idle(worker), timeout_s=10)
    assert (await fetch(database_url, approval_id))["status"] == "completed"
    assert [s.authorization for s in shop.seen] == ["Bearer rotated-token-2"]


async def test_a_rebuilt_request_that_differs_from_the_stored_one_is_not_sent(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    (approval_id,) = await insert_approved(database_url, tamper=True)
    async with worker_for(database_url) as worker:
        await worker.claim_once()
        await wait_until(lambda: idle(worker), timeout_s=10)
    row = await fetch(database_url, approval_id)
    assert row["status"] == "failed"
    assert row["response_payload"]["error_code"] == "internal_error"
    assert shop.seen == []


async def test_an_upstream_error_fails_the_approval_with_a_capped_masked_text(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    shop.status = 422
    shop.answer = f"bad token {TOKEN} " + "y" * 5000
    (approval_id,) = await insert_approved(database_url)
    async with worker_for(database_url) as worker:
        await worker.claim_once()
        await wait_until(lambda: idle(worker), timeout_s=10)
    row = await fetch(database_url, approval_id)
    assert row["status"] == "failed"
    payload = row["response_payload"]
    assert set(payload) == {"error_code", "message", "upstream_status", "upstream_text"}
    assert payload["error_code"] == "upstream_bad_request"
    assert payload["upstream_status"] == 422
    assert payload["message"]
    text = payload["upstream_text"]
    assert text.startswith("bad token **** yyy")
    assert TOKEN not in text
    assert len(text) == UPSTREAM_TEXT_CHARS


async def test_an_unreachable_upstream_fails_the_approval_without_a_status(
    client: Client, admin_token: str, database_url: str
) -> None:
    await publish_shop(client, admin_token, free_port())  # nothing listens there
    (approval_id,) = await insert_approved(database_url)
    async with worker_for(database_url) as worker:
        await worker.claim_once()
        await wait_until(lambda: idle(worker), timeout_s=10)
    payload = (await fetch(database_url, approval_id))["response_payload"]
    assert payload["error_code"] == "upstream_unavailable"
    assert payload["upstream_status"] is None
    assert payload["upstream_text"] is None


def _built(url: str, headers: tuple[tuple[str, str], ...], body: bytes | None) -> BuiltRequest:
    return BuiltRequest("POST", url, headers, body, "application/json", secret_values=("s3cr3t",))


def test_same_request_ignores_masked_values_and_nothing_else() -> None:
    stored = _built("http://h/x", (("Authorization", "Bearer s3cr3t"),), b"{}").redacted()
    assert stored["headers"] == [["Authorization", "Bearer ****"]]
    rotated = BuiltRequest(
        "POST", "http://h/x", (("Authorization", "Bearer other"),), b"{}", "application/json"
    )
    assert same_request(stored, rotated)
    assert not same_request(stored, _built("http://h/y", (("Authorization", "Bearer s"),), b"{}"))
    assert not same_request(stored, _built("http://h/x", (("Authorization", "Basic s"),), b"{}"))
    assert not same_request(stored, _built("http://h/x", (("Authorization", "Bearer s"),), None))
    assert not same_request(stored, _built("http://h/x", (), b"{}"))


# -- claiming ------------------------------------------------------------------


async def _claim(conn: Connection, owner: str, limit: int = 10) -> list[str]:
    running, failed = await store.claim(
        conn, owner=owner, limit=limit, margin_s=10, exhausted={"error_code": "internal_error"}
    )
    assert failed == []
    return [row.id for row in running]


async def test_a_row_locked_by_one_claim_is_skipped_by_another(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    first_id, second_id = await insert_approved(database_url, 2)
    async with (
        await connect(database_url) as one,
        await connect(database_url, autocommit=True) as two,
    ):
        # One claimer holds its transaction open over one row...
        assert await _claim(one, "one", limit=1) == [first_id]
        # ...the other does not wait for it and takes only the other row.
        assert await asyncio.wait_for(_claim(two, "two"), 5) == [second_id]
        assert await asyncio.wait_for(_claim(two, "two"), 5) == []
        await one.rollback()
        # Rolled back: the row is claimable again.
        assert await _claim(two, "two") == [first_id]


async def test_concurrent_claimers_take_each_row_exactly_once(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    ids = await insert_approved(database_url, 60)
    conns = [await connect(database_url, autocommit=True) for _ in range(4)]
    try:

        async def claimer(conn: Connection, owner: str) -> list[str]:
            taken: list[str] = []
            while batch := await _claim(conn, owner, limit=3):
                taken += batch
            return taken

        results = await asyncio.wait_for(
            asyncio.gather(*(claimer(c, f"owner-{i}") for i, c in enumerate(conns))), 20
        )
    finally:
        for conn in conns:
            await conn.close()
    taken = [approval_id for batch in results for approval_id in batch]
    assert sorted(taken) == sorted(ids)  # every row once, none twice
    assert sum(1 for batch in results if batch) > 1


async def test_an_expired_lease_is_reclaimed_with_the_next_attempt(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    (approval_id,) = await insert_approved(database_url)
    async with await connect(database_url, autocommit=True) as conn:
        assert await _claim(conn, "crashed") == [approval_id]
        assert await _claim(conn, "other") == []  # the lease is live
        await expire_lease(database_url, approval_id)
        assert await _claim(conn, "other") == [approval_id]
    row = await fetch(database_url, approval_id)
    assert (row["status"], row["attempt"], row["lease_owner"]) == ("executing", 2, "other")


async def test_the_lease_outlasts_timeout_times_attempts_plus_the_margin(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port, timeout_ms=7000)  # retries: 0
    await insert_approved(database_url)
    async with await connect(database_url, autocommit=True) as conn:
        running, _ = await store.claim(conn, owner="o", limit=1, margin_s=10, exhausted={})
        cur = await conn.execute(
            "SELECT extract(epoch FROM lease_expires_at - now()) AS left_s FROM approvals"
        )
        row = await cur.fetchone()
    assert running[0].lease_s == pytest.approx(17.0)
    assert row is not None
    assert 16 < float(row["left_s"]) <= 17


async def test_an_expired_lease_on_the_last_attempt_fails_the_approval(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    (approval_id,) = await insert_approved(database_url, max_attempts=2)
    async with await connect(database_url, autocommit=True) as conn:
        assert await _claim(conn, "first") == [approval_id]
        await expire_lease(database_url, approval_id)
        assert await _claim(conn, "second") == [approval_id]
        await expire_lease(database_url, approval_id)
    async with worker_for(database_url) as worker:
        assert await worker.claim_once() == 0  # nothing to run: the row failed instead
    row = await fetch(database_url, approval_id)
    assert row["status"] == "failed"
    assert row["attempt"] == 2
    assert row["response_payload"] == {
        "error_code": "internal_error",
        "message": row["response_payload"]["message"],
        "upstream_status": None,
        "upstream_text": None,
    }
    assert shop.seen == []


# -- leases while the call runs ------------------------------------------------


async def test_the_lease_is_renewed_while_the_call_runs(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    (approval_id,) = await insert_approved(database_url)
    shop.hold = 1
    async with worker_for(database_url, renew_every_s=0.05) as worker:
        await worker.claim_once()
        await asyncio.wait_for(shop.entered.wait(), 10)
        claimed_until = (await fetch(database_url, approval_id))["lease_expires_at"]

        async def renewed() -> bool:
            return bool(
                (await fetch(database_url, approval_id))["lease_expires_at"] > claimed_until
            )

        await wait_until(renewed, timeout_s=5)
        shop.gate.set()
        await wait_until(lambda: idle(worker), timeout_s=10)
    row = await fetch(database_url, approval_id)
    assert (row["status"], row["attempt"]) == ("completed", 1)


async def test_a_lost_lease_cancels_the_call_and_writes_nothing(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    (approval_id,) = await insert_approved(database_url)
    shop.hold = 1
    async with worker_for(database_url, renew_every_s=0.05) as worker:
        await worker.claim_once()
        await asyncio.wait_for(shop.entered.wait(), 10)
        # Another process re-claims the row (as after an expired lease).
        changed = await execute(
            database_url,
            "UPDATE approvals SET attempt = attempt + 1, lease_owner = 'thief' WHERE id = %s",
            approval_id,
        )
        assert changed == 1
        await wait_until(lambda: idle(worker), timeout_s=5)

        async def upstream_saw_the_cancel() -> bool:
            return shop.cancelled == 1

        await wait_until(upstream_saw_the_cancel, timeout_s=5)
    row = await fetch(database_url, approval_id)
    assert (row["status"], row["attempt"], row["lease_owner"]) == ("executing", 2, "thief")
    assert row["response_payload"] is None


async def test_stale_worker_cannot_finish_reclaimed_approval(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    (approval_id,) = await insert_approved(database_url)
    shop.hold = 1
    # No renewal before the answer: the stale worker only finds out when finishing.
    async with worker_for(database_url, renew_every_s=60) as stale:
        await stale.claim_once()
        await asyncio.wait_for(shop.entered.wait(), 10)
        await expire_lease(database_url, approval_id)
        async with await connect(database_url, autocommit=True) as conn:
            (fresh,), _ = await store.claim(
                conn, owner="worker-b", limit=1, margin_s=10, exhausted={}
            )
        shop.gate.set()
        await wait_until(lambda: idle(stale), timeout_s=10)
    row = await fetch(database_url, approval_id)
    assert (row["status"], row["attempt"], row["lease_owner"]) == ("executing", 2, "worker-b")
    assert row["response_payload"] is None
    async with await connect(database_url, autocommit=True) as conn:
        assert await store.finish(conn, fresh, "worker-b", "completed", {"id": "ord-2"})
    assert (await fetch(database_url, approval_id))["response_payload"] == {"id": "ord-2"}


async def test_calls_that_end_together_are_finished_in_shared_statements_each_once(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    count = 16  # under the executor's connections per host: every call reaches the shop
    await publish_shop(client, admin_token, shop.port)
    ids = await insert_approved(database_url, count)
    shop.hold = count  # every call waits, then all answer at once
    async with worker_for(database_url, concurrency=count) as worker:
        assert await worker.claim_once() == count

        async def all_held() -> bool:
            return len(shop.seen) == count

        await wait_until(all_held, timeout_s=10)
        shop.gate.set()
        await wait_until(lambda: idle(worker), timeout_s=10)
        statements = worker.finish_statements
    assert 1 <= statements < count  # outcomes that arrived together shared a statement
    for approval_id in ids:
        n = int(approval_id.removeprefix("approval_"), 16)
        row = await fetch(database_url, approval_id)
        assert (row["status"], row["attempt"]) == ("completed", 1)
        assert row["response_payload"]["item"] == f"sku-{n}"
        assert row["response_payload"]["id"].startswith("ord-")
    assert sorted(seen.key or "" for seen in shop.seen) == sorted(
        f"req-{int(i.removeprefix('approval_'), 16)}" for i in ids
    )


# -- shutdown ------------------------------------------------------------------


async def test_stop_lets_a_running_call_finish_within_the_grace_and_claims_nothing_new(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    (running_id,) = await insert_approved(database_url)
    shop.hold = 1
    async with worker_for(database_url, start=True, poll_s=0.05) as worker:
        await asyncio.wait_for(shop.entered.wait(), 10)
        stopping = asyncio.create_task(worker.stop(grace_s=10))
        await asyncio.sleep(0)  # stop() has stopped claiming
        (late_id,) = await insert_approved(database_url, notify=True)
        worker.wake()
        shop.gate.set()
        await asyncio.wait_for(stopping, 10)
    assert (await fetch(database_url, running_id))["status"] == "completed"
    assert (await fetch(database_url, late_id))["status"] == "approved"
    assert len(shop.seen) == 1


async def test_stop_releases_calls_still_running_after_the_grace(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    (again_id,) = await insert_approved(database_url)
    (last_id,) = await insert_approved(database_url, max_attempts=1)
    shop.hold = 2
    async with await connect(database_url, autocommit=True) as listener:
        await listener.execute(f"LISTEN {store.CHANNEL}")
        async with worker_for(database_url) as worker:
            assert await worker.claim_once() == 2

            async def both_held() -> bool:
                return len(shop.seen) == 2

            await wait_until(both_held, timeout_s=10)
            await asyncio.wait_for(worker.stop(grace_s=0.1), 10)
        notified = [n.payload async for n in listener.notifies(timeout=0.5, stop_after=2)]
    assert notified == [again_id]  # other replicas take the released row at once
    released = await fetch(database_url, again_id)
    # The attempt stays: the request may have reached the upstream.
    assert (released["status"], released["attempt"]) == ("approved", 1)
    assert released["lease_owner"] is None
    assert released["lease_expires_at"] is None
    last = await fetch(database_url, last_id)
    assert (last["status"], last["attempt"]) == ("failed", 1)
    assert last["response_payload"]["error_code"] == "internal_error"

    async def both_cancelled() -> bool:
        return shop.cancelled == 2

    await wait_until(both_cancelled, timeout_s=5)


# -- waking --------------------------------------------------------------------


async def test_a_notification_wakes_the_worker_through_the_listener(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    # Polls a minute apart: only the notification can start the claim in time.
    async with worker_for(database_url, start=True, poll_s=60) as worker:
        listener = Notifications(database_url, enabled=True)
        listener.subscribe(store.CHANNEL, lambda _payload: worker.wake())
        await listener.start()
        try:

            async def listening() -> bool:
                return listener.listening

            await wait_until(listening, timeout_s=5)
            await asyncio.sleep(0.1)  # the reconnect wake-up has been consumed
            (approval_id,) = await insert_approved(database_url, notify=True)
            await wait_until(lambda: status_is(database_url, approval_id, "completed"), 5)
        finally:
            await listener.stop()


async def test_polling_claims_approved_rows_without_any_notification(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    async with worker_for(database_url, start=True, poll_s=0.2):
        await asyncio.sleep(0.05)  # the first round found nothing
        (approval_id,) = await insert_approved(database_url)  # no NOTIFY
        await wait_until(lambda: status_is(database_url, approval_id, "completed"), 5)


async def test_a_claim_fills_only_the_free_slots(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    ids = await insert_approved(database_url, 3)
    shop.hold = 3
    async with worker_for(database_url, concurrency=2) as worker:
        assert await worker.claim_once() == 2
        assert await worker.claim_once() == 0  # every slot busy
        shop.gate.set()
        await wait_until(lambda: idle(worker), timeout_s=10)
        assert await worker.claim_once() == 1
        await wait_until(lambda: idle(worker), timeout_s=10)
    for approval_id in ids:
        assert (await fetch(database_url, approval_id))["status"] == "completed"


async def test_claiming_survives_a_database_error(
    client: Client, admin_token: str, database_url: str, shop: Shop
) -> None:
    await publish_shop(client, admin_token, shop.port)
    async with worker_for(database_url) as worker:
        await execute(database_url, "ALTER TABLE approvals RENAME TO approvals_away")
        try:
            assert await worker.claim_once() == 0  # logged, not raised
        finally:
            await execute(database_url, "ALTER TABLE approvals_away RENAME TO approvals")
        (approval_id,) = await insert_approved(database_url)
        assert await worker.claim_once() == 1
        await wait_until(lambda: idle(worker), timeout_s=10)
    assert (await fetch(database_url, approval_id))["status"] == "completed"
