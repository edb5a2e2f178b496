"""The demo sales API: a tiny in-memory REST service the demo ``sales`` agent calls.

``crank up`` runs it on loopback (``python -m control_plane.demo.sales_api
--port N``) and allowlists exactly it, so the demo's approval (refund) and
DELETE (draft order) flows complete offline. State lives in memory and is
reset on every start.

    GET    /orders?customer_id=&status=   list orders, newest first
    GET    /orders/{order_id}              one order
    DELETE /orders/{order_id}              delete a draft order (409 for any other status)
    POST   /refunds                        refund a paid order ({order_id, amount in minor
                                           units, currency (optional: must be the order's),
                                           reason}); needs Idempotency-Key:
                                           the same key and body return the same refund,
                                           the same key with another body is 409
    GET    /healthz
"""

from __future__ import annotations

import argparse
import os
import secrets
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog
from aiohttp import web

from shared.logging import configure_logging

log = structlog.get_logger(__name__)

HOST = "127.0.0.1"
REFUND_REASONS = ("requested_by_customer", "duplicate", "fraudulent", "damaged")


@dataclass(slots=True)
class Order:
    id: str
    customer_id: str
    status: str  # draft | paid | refunded
    amount: int  # minor units
    currency: str
    created_at: str
    refunded_amount: int = 0


@dataclass(frozen=True, slots=True)
class Refund:
    id: str
    order_id: str
    amount: int
    currency: str
    reason: str
    status: str
    created_at: str


@dataclass(slots=True)
class SalesStore:
    orders: dict[str, Order] = field(default_factory=dict)
    refunds: dict[str, Refund] = field(default_factory=dict)
    # Idempotency-Key -> (the request body it was first used with, the refund it made)
    refunds_by_key: dict[str, tuple[dict[str, Any], Refund]] = field(default_factory=dict)

    @classmethod
    def seeded(cls) -> SalesStore:
        orders = [
            Order("ord_123", "cus_123", "draft", 1200, "EUR", "2026-06-21T09:00:00Z"),
            Order("ord_456", "cus_123", "paid", 4999, "EUR", "2026-06-20T15:30:00Z"),
            Order("ord_789", "cus_456", "paid", 15000, "USD", "2026-06-19T11:05:00Z"),
            Order("ord_321", "cus_456", "refunded", 2500, "USD", "2026-06-18T08:45:00Z", 2500),
        ]
        return cls(orders={order.id: order for order in orders})


STORE_KEY = web.AppKey("store", SalesStore)


def _error(status: int, error: str, message: str) -> web.Response:
    return web.json_response({"error": error, "message": message}, status=status)


def _order_json(order: Order) -> dict[str, Any]:
    return asdict(order)


async def healthz(request: web.Request) -> web.Response:
    return web.json_response({"status": "ok"})


async def list_orders(request: web.Request) -> web.Response:
    store = request.app[STORE_KEY]
    customer_id = request.query.get("customer_id")
    status = request.query.get("status")
    orders = [
        _order_json(order)
        for order in sorted(store.orders.values(), key=lambda o: o.created_at, reverse=True)
        if (customer_id is None or order.customer_id == customer_id)
        and (status is None or order.status == status)
    ]
    return web.json_response({"orders": orders})


async def get_order(request: web.Request) -> web.Response:
    order = request.app[STORE_KEY].orders.get(request.match_info["order_id"])
    if order is None:
        return _error(404, "order_not_found", "no order with this id")
    return web.json_response(_order_json(order))


async def delete_order(request: web.Request) -> web.Response:
    store = request.app[STORE_KEY]
    order = store.orders.get(request.match_info["order_id"])
    if order is None:
        return _error(404, "order_not_found", "no order with this id")
    if order.status != "draft":
        return _error(
            409, "order_not_draft", f"only draft orders can be deleted; this is {order.status}"
        )
    del store.orders[order.id]
    log.info("order_deleted", order_id=order.id)
    return web.json_response({"id": order.id, "deleted": True})


def _refund_body(body: Any) -> dict[str, Any] | str:
    """The refund request's fields, or what is wrong with them."""
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    order_id, amount, reason = body.get("order_id"), body.get("amount"), body.get("reason")
    if not isinstance(order_id, str):
        return "order_id must be a string"
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
        return "amount must be a positive integer (minor units)"
    if reason not in REFUND_REASONS:
        return f"reason must be one of {', '.join(REFUND_REASONS)}"
    currency = body.get("currency")
    if currency is not None and not (isinstance(currency, str) and len(currency) == 3):
        return "currency must be an ISO 4217 code such as EUR"
    return {"order_id": order_id, "amount": amount, "currency": currency, "reason": reason}


async def create_refund(request: web.Request) -> web.Response:
    store = request.app[STORE_KEY]
    key = request.headers.get("Idempotency-Key", "").strip()
    if not key:
        return _error(400, "idempotency_key_missing", "send an Idempotency-Key header")
    try:
        raw = await request.json()
    except ValueError:
        return _error(400, "invalid_json", "the body is not JSON")
    body = _refund_body(raw)
    if isinstance(body, str):
        return _error(422, "invalid_request", body)

    seen = store.refunds_by_key.get(key)
    if seen is not None:
        first_body, refund = seen
        if first_body != body:
            return _error(
                409, "idempotency_key_reused", "this Idempotency-Key was used for another refund"
            )
        return web.json_response(asdict(refund), headers={"Idempotent-Replayed": "true"})

    order = store.orders.get(body["order_id"])
    if order is None:
        return _error(404, "order_not_found", "no order with this id")
    if order.status != "paid":
        return _error(
            409, "order_not_refundable", f"only paid orders can be refunded; this is {order.status}"
        )
    if body["currency"] not in (None, order.currency):
        return _error(
            422, "currency_mismatch", f"this order is in {order.currency}, not {body['currency']}"
        )
    left = order.amount - order.refunded_amount
    if body["amount"] > left:
        return _error(422, "amount_too_large", f"at most {left} is left to refund on this order")

    refund = Refund(
        id=f"re_{secrets.token_hex(6)}",
        order_id=order.id,
        amount=body["amount"],
        currency=order.currency,
        reason=body["reason"],
        status="succeeded",
        created_at=datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
    )
    order.refunded_amount += refund.amount
    if order.refunded_amount == order.amount:
        order.status = "refunded"
    store.refunds[refund.id] = refund
    store.refunds_by_key[key] = (body, refund)
    log.info("refund_created", refund_id=refund.id, order_id=order.id, amount=refund.amount)
    return web.json_response(asdict(refund), status=201)


def create_app(store: SalesStore | None = None) -> web.Application:
    app = web.Application()
    app[STORE_KEY] = store or SalesStore.seeded()
    app.add_routes(
        [
            web.get("/healthz", healthz),
            web.get("/orders", list_orders),
            web.get("/orders/{order_id}", get_order),
            web.delete("/orders/{order_id}", delete_order),
            web.post("/refunds", create_refund),
        ]
    )
    return app


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Crank's demo sales API (in memory, loopback only)"
    )
    parser.add_argument("--port", type=int, default=8090)
    args = parser.parse_args(argv)
    configure_logging(os.environ.get("CRANK_LOG_LEVEL") or "info")
    log.info("sales_api_listening", url=f"http://{HOST}:{args.port}")
    web.run_app(create_app(), host=HOST, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
