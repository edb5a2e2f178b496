"""Crank files the apply, lint and export tests share: the operations and agent
of workspace ``acme``, a seed with secrets, and what an apply could write."""

from __future__ import annotations

from typing import Any

from shared.db import connect

APPLY = "/api/v1/workspaces/acme/apply"


def rates_operation(**changes: Any) -> dict[str, Any]:
    """The frankfurter rates operation, with ``changes`` applied."""
    operation: dict[str, Any] = {
        "name": "frankfurter_latest_rate",
        "title": "Latest exchange rate",
        "description": "Gets the latest exchange rate between two currencies. Use when the "
        "user asks what one currency is worth in another today.",
        "input": {
            "type": "object",
            "properties": {
                "base": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "from"},
                "quote": {"type": "string", "pattern": "^[A-Z]{3}$", "description": "to"},
            },
            "required": ["base", "quote"],
            "additionalProperties": False,
        },
        "request": {
            "method": "GET",
            "url": "https://api.frankfurter.dev/v1/latest",
            "query": {"base": "base", "symbols": "quote"},
        },
        "response": {"select": "{base: base, date: date, rates: rates}"},
    }
    operation.update(changes)
    return operation


def delete_operation(**changes: Any) -> dict[str, Any]:
    """The delete_order operation (a DELETE), with ``changes`` applied."""
    operation: dict[str, Any] = {
        "name": "delete_order",
        "description": "Deletes one order by id. Use when the user asks to cancel an order.",
        "input": {
            "type": "object",
            "properties": {"order_id": {"type": "string", "description": "the order"}},
            "required": ["order_id"],
        },
        "request": {"method": "DELETE", "url": "https://orders.example/orders/{order_id}"},
    }
    operation.update(changes)
    return operation


def crank_file(**changes: Any) -> dict[str, Any]:
    """Workspace acme: both operations and the agent that uses them."""
    file: dict[str, Any] = {
        "workspace": "acme",
        "operations": [rates_operation(), delete_operation()],
        "agents": [
            {
                "slug": "currency-rates",
                "title": "Currency rates",
                "description": "Looks up exchange rates.",
                "operations": ["frankfurter_latest_rate", "delete_order"],
            }
        ],
    }
    file.update(changes)
    return file


async def snapshot(database_url: str) -> dict[str, Any]:
    """Everything an apply could write, to prove that one wrote nothing."""
    async with await connect(database_url) as conn:
        queries = {
            "catalog": "SELECT version FROM catalog_state",
            "audit": "SELECT count(*) FROM audit_log",
            "operations": "SELECT array_agg(name || ':' || revision || ':' || "
            "coalesce(latest_version, 0) ORDER BY name) FROM operations",
            "versions": "SELECT count(*) FROM operation_versions",
            "agents": "SELECT array_agg(slug || ':' || revision || ':' || published_version "
            "ORDER BY slug) FROM agents",
            "identity_providers": "SELECT array_agg(name || ':' || revision ORDER BY name) "
            "FROM identity_providers",
        }
        state = {}
        for key, query in queries.items():
            cur = await conn.execute(query)
            row = await cur.fetchone()
            assert row is not None
            state[key] = next(iter(row.values()))
        return state


SECRETS = {
    "SALES_TOKEN": "sales-secret-value-0001",
    "PARTNER_KEY": "partner-secret-value-0002",
    "BASIC_CREDS": "user:basic-secret-value-0003",
}

SEED = """\
operations:
  - name: get_exchange_rate
    title: Latest exchange rate
    description: |-
      Gets the latest exchange rate between two currencies.
      Use when the user asks what one currency is worth in another today.
    input:
      type: object
      properties:
        base: {type: string, pattern: "^[A-Z]{3}$", description: ISO 4217 code to convert from}
        quote: {type: string, pattern: "^[A-Z]{3}$", description: ISO 4217 code to convert to}
      required: [base, quote]
      additionalProperties: false
    request:
      method: GET
      url: https://rates.example/v1/latest
      query: {base: base, symbols: quote}
      headers: {Accept: application/json}
      auth: {type: header, name: X-Api-Key, secret: PARTNER_KEY}
    response:
      select: "{base: base, date: date, rates: rates}"
      max_bytes: 8192
      output_schema:
        type: object
        properties: {base: {type: string}, date: {type: string}, rates: {type: object}}
  - name: create_refund
    description: >-
      Refunds a paid order. Use when the user asks to give money back for an order.
    input:
      type: object
      properties:
        request_id: {type: string, description: A unique id for this refund}
        order_id: {type: string, description: The paid order}
        amount: {type: integer, minimum: 1, description: Amount in cents}
      required: [request_id, order_id, amount]
      additionalProperties: false
    request:
      method: POST
      url: https://sales.example/refunds
      body: "{order_id: order_id, amount: amount}"
      auth: {type: bearer, secret: SALES_TOKEN}
    response:
      select: "{refund_id: id, status: status}"
    execution_config:
      timeout_ms: 5000
      retries: 1
      idempotency: {argument: request_id, header: Idempotency-Key}
    safety:
      approval: true
  - name: delete_draft_order
    description: Deletes a draft order. Use when the user asks to discard a draft order.
    input:
      type: object
      properties:
        order_id: {type: string, description: The draft order}
      required: [order_id]
    request:
      method: DELETE
      url: https://sales.example/orders/{order_id}
      auth: {type: basic, secret: BASIC_CREDS}
    response:
      select: "{order_id: id, deleted: deleted}"
    execution_config:
      retries: 0
    safety:
      approval: true
      confirmation: true
  - name: list_orders
    description: Lists the newest orders. Use when the user asks which orders exist.
    input: {type: object, properties: {}}
    request:
      method: GET
      url: https://sales.example/orders
    response:
      select: "orders[].{id: id, status: status}"
      max_items: 20
agents:
  - slug: currency-rates
    title: Currency rates
    description: Looks up exchange rates.
    operations: [get_exchange_rate]
    rate_limit: {requests: 60, per_seconds: 60}
  - slug: sales
    title: Sales support
    description: Looks up, refunds and deletes orders.
    operations: [list_orders, create_refund, delete_draft_order]
  - slug: empty
"""
