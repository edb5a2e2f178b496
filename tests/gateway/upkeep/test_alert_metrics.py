"""The metrics the alert rules of deploy/prometheus/alerts.yaml read, through a real
gateway process: the database's reachability, the approvals and webhook
deliveries waiting in the database (read when /metrics is scraped), and the
rows re-claimed from an expired lease."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from shared.db import connect
from tests.support.api import Client, grant_egress
from tests.support.approvals import (
    Shop,
    behind_the_trigger,
    insert_pending,
    publish_shop,
    serve_shop,
    status_is,
)
from tests.support.gateway import run_gateway, wait_until
from tests.support.metrics import labels, scrape
from tests.support.webhooks import Receiver, serve_receiver, subscribe

HOUR_S = 3600.0


@pytest.fixture
async def shop() -> AsyncIterator[Shop]:
    async with serve_shop() as state:
        yield state


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    async with serve_receiver() as state:
        yield state


@pytest.fixture
async def subscribed(
    client: Client, admin_token: str, shop: Shop, receiver: Receiver
) -> dict[str, str]:
    """The shop behind approval, and a receiver subscribed to approval.created."""
    await publish_shop(client, admin_token, shop.port)
    await grant_egress(client, admin_token, "default", f"127.0.0.1:{receiver.port}")
    hook = await subscribe(client, admin_token, receiver.url, events=["approval.created"])
    receiver.secret = hook["secret"]
    return {"CRANK_UPSTREAM_ALLOWLIST": f"127.0.0.1:{shop.port},127.0.0.1:{receiver.port}"}


async def test_waiting_approvals_and_undelivered_webhooks_are_read_from_the_database(
    database_url: str, tmp_path: Path, receiver: Receiver, subscribed: dict[str, str]
) -> None:
    receiver.fail_first = 1_000_000  # the receiver is down: every delivery is retried
    await insert_pending(database_url, 2)  # each enqueues one approval.created delivery
    async with await connect(database_url, autocommit=True) as conn:
        await behind_the_trigger(
            conn, "UPDATE approvals SET created_at = now() - interval '2 hours'"
        )
        await conn.execute("UPDATE webhook_deliveries SET created_at = now() - interval '1 hour'")

    async with run_gateway(database_url, tmp_path, extra_env=subscribed) as gateway:
        await wait_until(lambda: _received(receiver), timeout_s=20)
        found = await scrape(gateway.metrics_port)

    assert found[("crank_database_reachable", frozenset())] == 1
    active = {
        status: found[("crank_approvals", labels(status=status))]
        for status in ("pending", "approved", "executing")
    }
    assert active == {"pending": 2, "approved": 0, "executing": 0}
    assert 2 * HOUR_S <= found[("crank_approval_oldest_pending_seconds", frozenset())] < 3 * HOUR_S
    assert found[("crank_webhook_backlog", frozenset())] == 2
    assert HOUR_S <= found[("crank_webhook_oldest_undelivered_seconds", frozenset())] < 2 * HOUR_S


async def test_an_empty_database_shows_no_backlog_at_zero_age(
    database_url: str, tmp_path: Path
) -> None:
    async with run_gateway(database_url, tmp_path) as gateway:
        found = await scrape(gateway.metrics_port)

    for name in (
        "crank_approval_oldest_pending_seconds",
        "crank_webhook_backlog",
        "crank_webhook_oldest_undelivered_seconds",
    ):
        assert found[(name, frozenset())] == 0, name
    assert found[("crank_approvals", labels(status="pending"))] == 0


async def test_rows_whose_lease_expired_are_reclaimed_and_counted_by_queue(
    database_url: str,
    tmp_path: Path,
    shop: Shop,
    receiver: Receiver,
    subscribed: dict[str, str],
) -> None:
    (approval_id,) = await insert_pending(database_url)
    # A process that died mid-call left both rows leased to it, the leases now run out.
    async with await connect(database_url) as conn, conn.transaction():
        await conn.execute(
            "UPDATE approvals SET status = 'approved', decided_at = now() WHERE id = %s",
            (approval_id,),
        )
        await conn.execute(
            """UPDATE approvals SET status = 'executing', attempt = 1, lease_owner = 'gone',
                      lease_expires_at = now() - interval '1 second' WHERE id = %s""",
            (approval_id,),
        )
        await conn.execute(
            """UPDATE webhook_deliveries SET status = 'delivering', attempts = 1,
                      lease_owner = 'gone', lease_expires_at = now() - interval '1 second'"""
        )

    async with run_gateway(database_url, tmp_path, extra_env=subscribed) as gateway:
        await wait_until(lambda: status_is(database_url, approval_id, "completed"), timeout_s=20)
        await wait_until(lambda: _received(receiver), timeout_s=20)
        found = await scrape(gateway.metrics_port)

    assert len(shop.seen) == 1
    expiries = {
        queue: found[("crank_lease_expiries_total", labels(queue=queue))]
        for queue in ("approvals", "webhooks")
    }
    assert expiries == {"approvals": 1, "webhooks": 1}


async def _received(receiver: Receiver) -> bool:
    return bool(receiver.received)
