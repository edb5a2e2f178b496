"""The demo sales API: idempotent refunds, draft-only deletes, plain reads."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from control_plane.demo.sales_api import SalesStore, create_app

SalesClient = TestClient[Any, Any]


@pytest.fixture
def store() -> SalesStore:
    return SalesStore.seeded()


@pytest.fixture
async def sales(store: SalesStore) -> AsyncIterator[SalesClient]:
    async with TestClient(TestServer(create_app(store))) as client:
        yield client


REFUND = {"order_id": "ord_456", "amount": 1000, "reason": "requested_by_customer"}


async def test_same_idempotency_key_returns_the_same_refund(
    sales: SalesClient, store: SalesStore
) -> None:
    headers = {"Idempotency-Key": "refund-ord_456-001"}
    first = await sales.post("/refunds", json=REFUND, headers=headers)
    second = await sales.post("/refunds", json=REFUND, headers=headers)

    assert first.status == 201
    assert second.status == 200
    assert second.headers["Idempotent-Replayed"] == "true"
    assert await second.json() == await first.json()
    assert len(store.refunds) == 1
    assert store.orders["ord_456"].refunded_amount == 1000


async def test_another_idempotency_key_makes_another_refund(
    sales: SalesClient, store: SalesStore
) -> None:
    one = await sales.post("/refunds", json=REFUND, headers={"Idempotency-Key": "key-one-0001"})
    two = await sales.post("/refunds", json=REFUND, headers={"Idempotency-Key": "key-two-0002"})

    assert (one.status, two.status) == (201, 201)
    assert (await one.json())["id"] != (await two.json())["id"]
    assert store.orders["ord_456"].refunded_amount == 2000


async def test_reused_idempotency_key_with_another_body_is_a_conflict(sales: SalesClient) -> None:
    headers = {"Idempotency-Key": "refund-ord_456-002"}
    await sales.post("/refunds", json=REFUND, headers=headers)
    other = await sales.post("/refunds", json={**REFUND, "amount": 5}, headers=headers)

    assert other.status == 409
    assert (await other.json())["error"] == "idempotency_key_reused"


async def test_refund_without_idempotency_key_is_refused(sales: SalesClient) -> None:
    response = await sales.post("/refunds", json=REFUND)

    assert response.status == 400
    assert (await response.json())["error"] == "idempotency_key_missing"


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        ({**REFUND, "order_id": "ord_123"}, 409, "order_not_refundable"),  # a draft
        ({**REFUND, "order_id": "ord_999"}, 404, "order_not_found"),
        ({**REFUND, "amount": 999_999}, 422, "amount_too_large"),
        ({**REFUND, "amount": 0}, 422, "invalid_request"),
        ({**REFUND, "reason": "because"}, 422, "invalid_request"),
        ({**REFUND, "currency": "USD"}, 422, "currency_mismatch"),  # ord_456 is in EUR
        ({**REFUND, "currency": 978}, 422, "invalid_request"),
    ],
)
async def test_refund_checks_the_order_amount_and_currency(
    sales: SalesClient, body: dict[str, Any], status: int, error: str
) -> None:
    response = await sales.post("/refunds", json=body, headers={"Idempotency-Key": "k-12345678"})

    assert response.status == status
    assert (await response.json())["error"] == error


async def test_full_refund_marks_the_order_refunded(sales: SalesClient) -> None:
    body = {"order_id": "ord_789", "amount": 15000, "reason": "damaged"}
    response = await sales.post("/refunds", json=body, headers={"Idempotency-Key": "full-0001"})
    order = await (await sales.get("/orders/ord_789")).json()

    assert response.status == 201
    assert order["status"] == "refunded"
    assert order["refunded_amount"] == 15000


async def test_only_draft_orders_can_be_deleted(sales: SalesClient) -> None:
    paid = await sales.delete("/orders/ord_456")
    draft = await sales.delete("/orders/ord_123")
    gone = await sales.get("/orders/ord_123")

    assert paid.status == 409
    assert (await paid.json())["error"] == "order_not_draft"
    assert draft.status == 200
    assert await draft.json() == {"id": "ord_123", "deleted": True}
    assert gone.status == 404


async def test_orders_are_listed_newest_first_and_filtered(sales: SalesClient) -> None:
    everything = (await (await sales.get("/orders")).json())["orders"]
    paid = (await (await sales.get("/orders", params={"status": "paid"})).json())["orders"]
    of_customer = (await (await sales.get("/orders", params={"customer_id": "cus_456"})).json())[
        "orders"
    ]

    assert [o["id"] for o in everything] == ["ord_123", "ord_456", "ord_789", "ord_321"]
    assert [o["id"] for o in paid] == ["ord_456", "ord_789"]
    assert {o["customer_id"] for o in of_customer} == {"cus_456"}
