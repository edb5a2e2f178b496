"""The approval-key endpoints, a lean ASGI handler like the MCP endpoint's.

    GET  {/mcp}/v1/{workspace}/{agent}/approvals[?status=&cursor=&limit=]
    GET  {/mcp}/v1/{workspace}/{agent}/approvals/{id}
    POST {/mcp}/v1/{workspace}/{agent}/approvals/{id}/approve   {"approve": "yes", "note": ...}
    POST {/mcp}/v1/{workspace}/{agent}/approvals/{id}/deny      {"approve": "no", "note": ...}

Order of checks (DESIGN "Status precedence", as on the MCP endpoint): Origin
(403; an allowed one gets CORS headers on every answer, and a preflight
``OPTIONS`` is answered before auth, as browsers send it without
credentials) → bearer key (401) → workspace and agent published (404) → an
approval key of this agent (403: an agent key, another agent's key) → HTTP
method (405) → the body (400) → the row: unknown or another agent's (404),
not pending (409, with its status). Errors are ``{"code", "message"}`` like
the admin API's.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal
from urllib.parse import parse_qsl

import msgspec
import psycopg
import structlog

from mcp_gateway.approvals import store
from mcp_gateway.asgi import BodyTooLarge, Headers, Receive, Scope, Send, read_body, respond
from mcp_gateway.endpoint import LOOPBACK_HOSTS, bearer, origin_allowed
from mcp_gateway.keys import RETRY_AFTER_S, KeyLookupUnavailable
from mcp_gateway.state import GatewayState
from shared.keys import display_prefix

log = structlog.get_logger(__name__)

PATH = re.compile(r"^(?:/mcp)?/v1/([^/]+)/([^/]+)/approvals(?:/([^/]+)(?:/(approve|deny))?)?/?$")
MAX_BODY_BYTES = 16_384
MAX_NOTE_CHARS = 2000
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


class Problem(Exception):
    """An answer other than 200: HTTP status, error code, message (and extras)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        *,
        extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status, self.code, self.message = status, code, message
        self.extra = extra or {}
        self.headers = headers or {}


async def handle(
    state: GatewayState, scope: Scope, receive: Receive, send: Send, match: re.Match[str]
) -> None:
    """Answer a request on an approvals path (``match``: of ``PATH``)."""
    workspace, slug, approval_id, action = match.groups()
    headers = Headers(scope)
    cors = {"Vary": "Origin"}
    origin = headers.get("origin")
    if origin is not None:
        loopback_ok = state.settings.host in LOOPBACK_HOSTS
        if not origin_allowed(origin, state.settings.allowed_origins, loopback_ok=loopback_ok):
            await _answer(send, 403, {"code": "forbidden", "message": "Origin not allowed"}, cors)
            return
        cors["Access-Control-Allow-Origin"] = origin
    allowed = "POST" if action else "GET"
    if scope["method"] == "OPTIONS":
        preflight = _PREFLIGHT if origin is not None else {}
        await respond(send, 204, headers={**cors, **preflight, "Allow": f"{allowed}, OPTIONS"})
        return
    try:
        body = await _serve(state, scope, receive, headers, (workspace, slug, approval_id, action))
    except Problem as problem:
        await _answer(
            send,
            problem.status,
            {"code": problem.code, "message": problem.message, **problem.extra},
            {**cors, **problem.headers},
        )
        return
    except Exception:
        log.exception("approvals_endpoint_failed", path=scope["path"])
        error = {"code": "internal_error", "message": "internal error; retry later"}
        await _answer(send, 500, error, cors)
        return
    await respond(send, 200, body, headers=cors)


async def _answer(send: Send, status: int, body: dict[str, Any], headers: dict[str, str]) -> None:
    await respond(send, status, _encoder.encode(body), headers=headers)


async def _serve(
    state: GatewayState,
    scope: Scope,
    receive: Receive,
    headers: Headers,
    route: tuple[str, str, str | None, str | None],
) -> bytes:
    workspace, slug, approval_id, action = route
    token = bearer(headers)
    snapshot = state.refresher.snapshot
    try:
        key = await state.keys.resolve(token, snapshot) if token else None
    except KeyLookupUnavailable:
        message = "cannot check this API key now; retry"
        raise Problem(503, "unavailable", message, headers=_RETRY) from None
    if key is None or token is None:
        raise Problem(
            401,
            "unauthorized",
            "missing or invalid API key: send 'Authorization: Bearer <approval_api_key>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    agent = snapshot.agents.get((workspace, slug))
    if agent is None or not agent.published:
        raise Problem(404, "not_found", f"agent {workspace}/{slug} is not published")
    if key.agent_id != agent.id or key.kind != "approval":
        reason = "an agent key" if key.kind != "approval" else "an approval key of another agent"
        raise Problem(403, "forbidden", f"this is {reason}; use this agent's approval key")
    state.key_use.mark(key.id)

    method = scope["method"]
    allowed = "POST" if action else "GET"
    if method != allowed:
        raise Problem(
            405,
            "method_not_allowed",
            f"use {allowed} here",
            headers={"Allow": f"{allowed}, OPTIONS"},
        )
    try:
        if action is not None:
            assert approval_id is not None
            decision = await _decision_body(receive, headers, action)
            return await _decide(
                state, agent.id, f"{workspace}/{slug}", approval_id, token, action, decision
            )
        if approval_id is not None:
            return await _read(state, agent.id, approval_id)
        return await _list(state, agent.id, scope)
    except (psycopg.OperationalError, psycopg.InterfaceError):
        log.warning("approvals_database_unavailable", exc_info=True)
        raise Problem(
            503, "unavailable", "the database is not reachable now; retry", headers=_RETRY
        ) from None


async def _decision_body(receive: Receive, headers: Headers, action: str) -> DecisionBody:
    content_type = (headers.get("content-type") or "application/json").split(";")[0]
    if content_type.strip().lower() != "application/json":
        raise Problem(415, "unsupported_media_type", "send Content-Type: application/json")
    try:
        raw = await read_body(receive, MAX_BODY_BYTES)
    except BodyTooLarge:
        raise Problem(413, "body_too_large", f"the body is over {MAX_BODY_BYTES} bytes") from None
    try:
        body = _decision_decoder.decode(raw)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise Problem(400, "bad_request", f"invalid decision body: {exc}") from None
    expected = "yes" if action == "approve" else "no"
    if body.approve != expected:
        raise Problem(
            400,
            "bad_request",
            f'send {{"approve": "{expected}"}} to /{action}, not {body.approve!r}',
        )
    return body


async def _decide(
    state: GatewayState,
    agent_id: int,
    agent: str,
    approval_id: str,
    token: str,
    action: str,
    body: DecisionBody,
) -> bytes:
    status: Literal["approved", "denied"] = "approved" if action == "approve" else "denied"
    decided_by = display_prefix(token)
    decision = store.Decision(approval_id, agent_id, agent, status, decided_by, body.note)
    async with state.pool.connection() as conn:
        record = await store.decide(conn, decision)
        if record is None:
            await store.expire(conn, approval_id)  # past its time: say so, as expired
            record = await store.get(conn, agent_id, approval_id)
            if record is None:
                raise Problem(404, "not_found", f"no approval {approval_id} for this agent")
            raise Problem(
                409,
                "not_pending",
                f"approval {approval_id} is {record.status}, not pending; nothing was changed",
                extra={"status": record.status},
            )
    log.info("approval_decided", approval_id=approval_id, status=status, decided_by=decided_by)
    return _encoder.encode(record)


async def _read(state: GatewayState, agent_id: int, approval_id: str) -> bytes:
    async with state.pool.connection() as conn:
        await store.expire(conn, approval_id)
        record = await store.get(conn, agent_id, approval_id)
    if record is None:
        raise Problem(404, "not_found", f"no approval {approval_id} for this agent")
    return _encoder.encode(record)


async def _list(state: GatewayState, agent_id: int, scope: Scope) -> bytes:
    query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
    status = query.get("status") or None
    if status is not None and status not in store.STATUSES:
        allowed = ", ".join(sorted(store.STATUSES))
        raise Problem(400, "bad_request", f"status must be one of {allowed}")
    try:
        limit = int(query.get("limit") or store.DEFAULT_PAGE)
    except ValueError:
        limit = 0
    if not 1 <= limit <= store.MAX_PAGE:
        raise Problem(400, "bad_request", f"limit must be between 1 and {store.MAX_PAGE}")
    async with state.pool.connection() as conn:
        await store.expire_overdue_for_agent(conn, agent_id)
        try:
            page = await store.list_page(conn, agent_id, status, query.get("cursor"), limit)
        except store.BadCursor as exc:
            raise Problem(400, "bad_request", str(exc)) from None
    return _encoder.encode(page)
