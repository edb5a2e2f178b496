"""Webhook subscriptions of agents and their delivery log
(docs/architecture.md, "Webhooks").

A subscription names a URL, the approval events it wants and a format
(``standard`` or ``slack``). Its signing secret (shared.webhook_signing) is
made here, returned in the creation answer once, and stored sealed with
``SecretBox`` (bound to the subscription's id); no other answer holds it. A
subscription is immutable: to change one, create another and delete the
old. Deleting revokes it (``revoked_at``): its deliveries not yet made fail
with "subscription revoked", and the delivery log stays readable.

The audit log records the URL's host, the events and the format, never the
whole URL (a Slack webhook URL is itself a credential) or the secret.
"""

from __future__ import annotations

import re
import secrets
from datetime import datetime
from typing import Any

import msgspec
from yarl import URL

from control_plane.auth import Workspace
from control_plane.errors import NotFound, ValidationFailed
from control_plane.services.agents import require_agent
from control_plane.services.apply_plan import WebhookChange
from control_plane.services.audit import record_change
from control_plane.services.audit_query import DEFAULT_LIMIT, next_page, page_start
from shared.crypto import SecretBox
from shared.db import Connection
from shared.engine.spec import WebhookSpec
from shared.engine.spec_validation import FieldError, validate_webhook
from shared.webhook_signing import new_signing_secret, subscription_associated_data

MAX_SUBSCRIPTIONS_PER_AGENT = 20
_ID = re.compile(r"whsub_[0-9a-f]{24}")


class WebhookView(msgspec.Struct, kw_only=True):
    """A subscription as listings show it: never its signing secret."""

    id: str
    agent: str
    url: str
    events: list[str]
    format: str
    created_at: datetime
    created_by: str
    revoked_at: datetime | None


class CreatedWebhook(WebhookView, kw_only=True):
    """A subscription just created; ``secret`` is the only copy there will ever be."""

    secret: str


class DeliveryView(msgspec.Struct, kw_only=True):
    """One delivery in the log: its webhook-id, the event and how sending went."""

    id: int
    webhook_id: str
    event: str
    approval_id: str
    status: str  # pending | delivering | delivered | failed
    attempts: int
    created_at: datetime
    next_attempt_at: datetime
    last_status: int | None
    last_error: str | None
    delivered_at: datetime | None
    finished_at: datetime | None


class DeliveryPage(msgspec.Struct, kw_only=True):
    """Newest first; ``next_cursor`` is None on the last page."""

    items: list[DeliveryView]
    next_cursor: str | None


def _check(spec: WebhookSpec) -> None:
    errors = validate_webhook(spec)
    if errors:
        raise ValidationFailed(errors)


def same_subscription(view: WebhookView, spec: WebhookSpec) -> bool:
    """Whether a live subscription already is what ``spec`` asks for (apply's idempotence)."""
    return (
        view.url == spec.url
        and sorted(view.events) == sorted(spec.events)
        and view.format == spec.format
    )


_SELECT = """SELECT s.id, a.slug AS agent, s.url, s.events, s.format, s.created_at,
                    s.created_by, s.revoked_at
               FROM webhook_subscriptions s JOIN agents a ON a.id = s.agent_id"""


async def list_webhooks(conn: Connection, ws: Workspace, agent: str) -> list[WebhookView]:
    """The agent's live subscriptions, oldest first; 404 for an unknown agent."""
    row = await require_agent(conn, ws, agent)
    cur = await conn.execute(
        f"{_SELECT} WHERE s.agent_id = %s AND s.revoked_at IS NULL ORDER BY s.created_at, s.id",
        (row.id,),
    )
    return [WebhookView(**r) for r in await cur.fetchall()]


async def get_webhook(conn: Connection, ws: Workspace, agent: str, webhook_id: str) -> WebhookView:
    """One subscription of the agent, revoked ones too; 404 otherwise."""
    row = await require_agent(conn, ws, agent)
    if _ID.fullmatch(webhook_id) is not None:
        cur = await conn.execute(
            f"{_SELECT} WHERE s.id = %s AND s.agent_id = %s", (webhook_id, row.id)
        )
        found = await cur.fetchone()
        if found is not None:
            return WebhookView(**found)
    raise NotFound(f"webhook {webhook_id!r} not found for agent {agent!r}")


def _audit_details(spec: WebhookSpec, agent: str) -> dict[str, Any]:
    return {
        "agent": agent,
        "host": URL(spec.url).host,
        "events": spec.events,
        "format": spec.format,
    }


async def create_webhook(
    conn: Connection, box: SecretBox, ws: Workspace, actor: str, agent: str, spec: WebhookSpec
) -> CreatedWebhook:
    """A new subscription and its signing secret (shown this once); audited."""
    _check(spec)
    row = await require_agent(conn, ws, agent)
    # The agent row is locked so two concurrent creations count each other.
    await conn.execute("SELECT 1 FROM agents WHERE id = %s FOR UPDATE", (row.id,))
    cur = await conn.execute(
        "SELECT count(*) AS n FROM webhook_subscriptions WHERE agent_id = %s AND revoked_at IS NULL",
        (row.id,),
    )
    counted = await cur.fetchone()
    if counted is not None and counted["n"] >= MAX_SUBSCRIPTIONS_PER_AGENT:
        raise ValidationFailed(
            [FieldError("", f"an agent has at most {MAX_SUBSCRIPTIONS_PER_AGENT} webhooks")]
        )
    webhook_id = "whsub_" + secrets.token_hex(12)
    # created_at is the clock's, not the transaction's: one apply creating several
    # keeps them in file order (listings and export sort by it).
    secret = new_signing_secret()
    sealed = box.seal(secret, subscription_associated_data(webhook_id))
    cur = await conn.execute(
        """INSERT INTO webhook_subscriptions
                  (id, workspace_id, agent_id, url, events, format, ciphertext, nonce, key_id,
                   created_by, created_at)
           VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, clock_timestamp())
           RETURNING created_at""",
        (
            webhook_id,
            ws.id,
            row.id,
            spec.url,
            spec.events,
            spec.format,
            sealed.ciphertext,
            sealed.nonce,
            sealed.key_id,
            actor,
        ),
    )
    created = await cur.fetchone()
    assert created is not None
    await record_change(conn, ws, actor, "webhook.create", webhook_id, _audit_details(spec, agent))
    return CreatedWebhook(
        id=webhook_id,
        agent=agent,
        url=spec.url,
        events=list(spec.events),
        format=spec.format,
        created_at=created["created_at"],
        created_by=actor,
        revoked_at=None,
        secret=secret,
    )


async def revoke_webhook(
    conn: Connection, ws: Workspace, actor: str, agent: str, webhook_id: str
) -> WebhookView:
    """Revoke a subscription; deliveries not yet made fail. Revoking a revoked one
    answers it unchanged (no audit row), so a retried delete is safe."""
    view = await get_webhook(conn, ws, agent, webhook_id)
    if view.revoked_at is not None:
        return view
    cur = await conn.execute(
        """UPDATE webhook_subscriptions SET revoked_at = now()
            WHERE id = %s AND revoked_at IS NULL RETURNING revoked_at""",
        (webhook_id,),
    )
    revoked = await cur.fetchone()
    if revoked is None:  # revoked by a concurrent delete
        return await get_webhook(conn, ws, agent, webhook_id)
    await conn.execute(
        """UPDATE webhook_deliveries
              SET status = 'failed', finished_at = now(), lease_expires_at = NULL,
                  last_error = 'subscription revoked'
            WHERE subscription_id = %s AND status IN ('pending', 'delivering')""",
        (webhook_id,),
    )
    spec = WebhookSpec(url=view.url, events=view.events, format=view.format)
    await record_change(conn, ws, actor, "webhook.delete", webhook_id, _audit_details(spec, agent))
    return msgspec.structs.replace(view, revoked_at=revoked["revoked_at"])


async def list_deliveries(
    conn: Connection,
    ws: Workspace,
    agent: str,
    webhook_id: str,
    *,
    limit: int = DEFAULT_LIMIT,
    cursor: str | None = None,
) -> DeliveryPage:
    """One page of a subscription's delivery log, newest first (keyset on id)."""
    before = page_start(limit, cursor)
    await get_webhook(conn, ws, agent, webhook_id)
    cur = await conn.execute(
        """SELECT id, webhook_id, event, approval_id, status, attempts, created_at,
                  next_attempt_at, last_status, last_error, delivered_at, finished_at
             FROM webhook_deliveries
            WHERE subscription_id = %(sub)s AND (%(before)s::bigint IS NULL OR id < %(before)s)
            ORDER BY id DESC
            LIMIT %(limit)s""",
        {"sub": webhook_id, "before": before, "limit": limit + 1},
    )
    rows = await cur.fetchall()
    return DeliveryPage(
        items=[DeliveryView(**row) for row in rows[:limit]], next_cursor=next_page(rows, limit)
    )


async def sync_webhooks(
    conn: Connection,
    box: SecretBox,
    ws: Workspace,
    actor: str,
    agent: str,
    wanted: list[WebhookSpec],
) -> list[WebhookChange]:
    """Make the agent's live subscriptions the ``wanted`` ones: a live subscription
    with the same URL, events and format is kept (its secret is never shown again),
    the others are revoked, and the missing ones created. Applying the same list
    twice changes nothing the second time."""
    unmatched = await list_webhooks(conn, ws, agent)
    missing: list[WebhookSpec] = []
    for spec in wanted:
        match = next((view for view in unmatched if same_subscription(view, spec)), None)
        if match is None:
            missing.append(spec)
        else:
            unmatched.remove(match)
    changes: list[WebhookChange] = []
    for view in unmatched:  # revoked first: the per-agent limit counts live ones
        await revoke_webhook(conn, ws, actor, agent, view.id)
        changes.append(
            WebhookChange(
                action="delete", id=view.id, url=view.url, events=view.events, format=view.format
            )
        )
    for spec in missing:
        created = await create_webhook(conn, box, ws, actor, agent, spec)
        changes.append(
            WebhookChange(
                action="create",
                id=created.id,
                url=created.url,
                events=created.events,
                format=created.format,
                secret=created.secret,
            )
        )
    return changes
