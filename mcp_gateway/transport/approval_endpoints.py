"""The approval-key endpoints, a lean ASGI handler like the MCP endpoint's.

    GET  {/mcp}/v1/{workspace}/{agent}/approvals[?status=&cursor=&limit=]
    GET  {/mcp}/v1/{workspace}/{agent}/approvals/{id}
    POST {/mcp}/v1/{workspace}/{agent}/approvals/{id}/approve   {"approve": "yes", "note": ...}
    POST {/mcp}/v1/{workspace}/{agent}/approvals/{id}/deny      {"approve": "no", "note": ...}

Order of checks (docs/architecture.md, "Status precedence"; the
authentication is the MCP endpoint's, mcp_gateway.transport.auth): Origin (403; an
allowed one gets CORS headers on every answer, and a preflight ``OPTIONS``
is answered before auth, as browsers send it without credentials) → bearer
key (401) → workspace and agent published (404) → an approval key of this
agent (403: an agent key, another agent's key) → HTTP method (405) → the
body (429, 408, 413: mcp_gateway.transport.body_reads; 400) → the row: an id
not of the shape ``approval_<32 hex>`` (404, before any query), unknown or
another agent's (404), not pending (409, with its status). Every statement is
scoped to the key's agent (mcp_gateway.approvals.store). What an answer shows of
a record is masked with the workspace's secrets (the arguments, the note, the
payload), and a note is masked before it is stored (docs/architecture.md,
"Approval decisions"). Every refusal is a ProtocolError, answered here as
``{"code", "message"}`` like the admin API's errors.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal
from urllib.parse import parse_qsl

import msgspec
import psycopg
import structlog

from mcp_gateway.approvals import store
from mcp_gateway.catalog.keys import RETRY_AFTER_S
from mcp_gateway.catalog.snapshot import Agent, Key
from mcp_gateway.transport.asgi import (
    CLOSE,
    BodyTooLarge,
    Headers,
    Receive,
    Scope,
    Send,
    respond,
)
from mcp_gateway.transport.auth import authenticate, bearer, checked_origin
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.state import GatewayState
from shared.approval_decisions import MAX_NOTE_CHARS
from shared.approval_records import shown
from shared.engine.masking import workspace_masker
from shared.keys import display_prefix

log = structlog.get_logger(__name__)

PATH = re.compile(r"^(?:/mcp)?/v1/([^/]+)/([^/]+)/approvals(?:/([^/]+)(?:/(approve|deny))?)?/?$")
MAX_BODY_BYTES = 16_384
_PREFLIGHT = {
    "Access-Control-Allow-Methods": "GET, POST, OPTIONS",
    "Access-Control-Allow-Headers": "Authorization, Content-Type",
    "Access-Control-Max-Age": "600",
}
_RETRY = {"Retry-After": str(RETRY_AFTER_S)}
_encoder = msgspec.json.Encoder()


class DecisionBody(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    approve: str
    note: Annotated[str, msgspec.Meta(max_length=MAX_NOTE_CHARS)] | None = None


_decision_decoder = msgspec.json.Decoder(DecisionBody)


async def handle(
    state: GatewayState, scope: Scope, receive: Receive, send: Send, match: re.Match[str]
) -> None:
    """Answer a request on an approvals path (``match``: of ``PATH``)."""
    workspace, slug, approval_id, action = match.groups()
    headers = Headers(scope)
    cors = {"Vary": "Origin"}
    try:
        origin = checked_origin(state.settings, headers)
        if origin is not None:
            cors["Access-Control-Allow-Origin"] = origin
        allowed = "POST" if action else "GET"
        if scope["method"] == "OPTIONS":  # before the key: browsers send no credentials here
            preflight = _PREFLIGHT if origin is not None else {}
            await respond(send, 204, headers={**cors, **preflight, "Allow": f"{allowed}, OPTIONS"})
            return
        # The whole sequence, Origin included (checked again: one set look-up).
        agent, key = await authenticate(state, scope, headers, workspace, slug, "approval")
        if scope["method"] != allowed:
            raise ProtocolError(
                405, f"use {allowed} here", headers={"Allow": f"{allowed}, OPTIONS"}
            )
        body = await _serve(state, scope, receive, headers, (agent, key), (approval_id, action))
    except ProtocolError as problem:
        await respond(
            send,
            problem.status,
            problem.problem_body(),
            # A refusal may come before the body was read (asgi.CLOSE).
            headers={**cors, **(problem.headers or {}), **CLOSE},
        )
        return
    except Exception:
        log.exception("approvals_endpoint_failed", path=scope["path"])
        crashed = ProtocolError(500, "internal error; retry later")
        await respond(send, 500, crashed.problem_body(), headers=cors)
        return
    await respond(send, 200, body, headers=cors)


async def _serve(
    state: GatewayState,
    scope: Scope,
    receive: Receive,
    headers: Headers,
    caller: tuple[Agent, Key],
    route: tuple[str | None, str | None],
) -> bytes:
    """The answer of an authenticated request: a list, a record, or a decision."""
    agent, key = caller
    approval_id, action = route
    try:
        if action is not None:
            assert approval_id is not None
            raw = await _raw_body(state, key, receive, headers)
            decision = _decision(raw, action)
            return await _decide(state, agent, _known_shape(approval_id), headers, action, decision)
        if approval_id is not None:
            return await _read(state, agent, _known_shape(approval_id))
        return await _list(state, agent, scope)
    except psycopg.DataError:
        # A value the database refuses (the checks above should have caught it):
        # the request's fault, so 400, and logged, so the missing check gets added.
        log.warning("approvals_value_refused", exc_info=True)
        raise ProtocolError(400, "the request holds a value that cannot be stored") from None
    except (psycopg.OperationalError, psycopg.InterfaceError):
        log.warning("approvals_database_unavailable", exc_info=True)
        raise ProtocolError(
            503, "the database is not reachable now; retry", headers=_RETRY
        ) from None


def _known_shape(approval_id: str) -> str:
    """The id when it has the shape of one; a 404 before any query otherwise (a NUL,
    say, which PostgreSQL text cannot hold)."""
    if not store.is_approval_id(approval_id):
        raise ProtocolError(404, "no such approval for this agent")
    return approval_id


async def _raw_body(state: GatewayState, key: Key, receive: Receive, headers: Headers) -> bytes:
    """A decision's bytes, read under the key's body-read bounds (transport.body_reads)."""
    content_type = (headers.get("content-type") or "application/json").split(";")[0]
    if content_type.strip().lower() != "application/json":
        raise ProtocolError(415, "send Content-Type: application/json")
    try:
        return await state.body_reads.read(key.id, receive, MAX_BODY_BYTES)
    except BodyTooLarge:
        raise ProtocolError(413, f"the body is over {MAX_BODY_BYTES} bytes") from None


def _decision(raw: bytes, action: str) -> DecisionBody:
    try:
        body = _decision_decoder.decode(raw)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise ProtocolError(400, f"invalid decision body: {exc}") from None
    if body.note is not None and "\x00" in body.note:
        raise ProtocolError(
            400, "invalid decision body: note must not contain NUL characters - at `$.note`"
        )
    expected = "yes" if action == "approve" else "no"
    if body.approve != expected:
        raise ProtocolError(
            400, f'send {{"approve": "{expected}"}} to /{action}, not {body.approve!r}'
        )
    return body


async def _decide(
    state: GatewayState,
    agent: Agent,
    approval_id: str,
    headers: Headers,
    action: str,
    body: DecisionBody,
) -> bytes:
    status: Literal["approved", "denied"] = "approved" if action == "approve" else "denied"
    token = bearer(headers)
    assert token is not None  # authenticate found this key
    decided_by = display_prefix(token)
    masker = workspace_masker(agent.secrets)
    note = None if body.note is None else masker.text(body.note)  # stored and audited masked
    decision = store.Decision(
        approval_id, agent.id, f"{agent.workspace}/{agent.slug}", status, decided_by, note
    )
    async with state.pool.connection() as conn:
        record = await store.decide_or_status(conn, decision)
    if record is None:
        raise ProtocolError(404, f"no approval {approval_id} for this agent")
    if isinstance(record, str):
        raise ProtocolError(
            409,
            f"approval {approval_id} is {record}, not pending; nothing was changed",
            name="not_pending",
            data={"status": record},
        )
    if status == "approved":
        state.approvals.approved()  # committed: wake the workers (approvals.wakeups)
    log.info("approval_decided", approval_id=approval_id, status=status, decided_by=decided_by)
    return _encoder.encode(shown(record, masker))


async def _read(state: GatewayState, agent: Agent, approval_id: str) -> bytes:
    async with state.pool.connection() as conn:
        await store.expire(conn, agent.id, approval_id)
        record = await store.get(conn, agent.id, approval_id)
    if record is None:
        raise ProtocolError(404, f"no approval {approval_id} for this agent")
    return _encoder.encode(shown(record, workspace_masker(agent.secrets)))


async def _list(state: GatewayState, agent: Agent, scope: Scope) -> bytes:
    query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
    status = query.get("status") or None
    if status is not None and status not in store.STATUSES:
        allowed = ", ".join(sorted(store.STATUSES))
        raise ProtocolError(400, f"status must be one of {allowed}")
    try:
        limit = int(query.get("limit") or store.DEFAULT_PAGE)
    except ValueError:
        limit = 0
    if not 1 <= limit <= store.MAX_PAGE:
        raise ProtocolError(400, f"limit must be between 1 and {store.MAX_PAGE}")
    async with state.pool.connection() as conn:
        await store.expire_overdue_for_agent(conn, agent.id)
        try:
            page = await store.list_page(conn, agent.id, status, query.get("cursor"), limit)
        except store.BadCursor as exc:
            raise ProtocolError(400, str(exc)) from None
    masker = workspace_masker(agent.secrets)
    page.items = [shown(record, masker) for record in page.items]
    return _encoder.encode(page)
