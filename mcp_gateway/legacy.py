"""The legacy protocol era (2025-03-26, 2025-06-18, 2025-11-25): initialize and sessions.

Sessions are signed ids (mcp_gateway.sessions): any replica checks one without
the database. A request inside a session without ``MCP-Protocol-Version`` uses
the session's negotiated version (DESIGN "Seed curl sequence"); one whose
header differs gets 400. Batches exist only in 2025-03-26.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
import psycopg
import structlog

from mcp_gateway.asgi import (
    BodyTooLarge,
    read_body,
)
from mcp_gateway.call import LEGACY_VERSIONS, Call, accepts, json_content
from mcp_gateway.catalog import BadCursor, server_info, tools_list_response
from mcp_gateway.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    InvalidMessage,
    Message,
    decode,
    encode,
    error,
    parse_message,
    result,
)
from mcp_gateway.metrics import REQUESTS
from mcp_gateway.rate_limits import MethodClass
from mcp_gateway.sessions import MalformedSessionId, SessionClaims, session_hash
from mcp_gateway.streams import LIST_CHANGED, serve_stream
from mcp_gateway.tool_call import tools_call
from shared.db import within

log = structlog.get_logger(__name__)

BATCH_VERSION = "2025-03-26"
_LIST_CHANGED = encode({"jsonrpc": "2.0", "method": LIST_CHANGED})


async def handle(call: Call, method: str, version_header: str | None) -> None:
    if method == "POST":
        await _post(call, version_header)
    elif method == "GET":
        await _listen(call, version_header)
    else:
        await _delete(call, version_header)


async def _bad(call: Call, status: int, code: int, message: str, request_id: Any = None) -> None:
    await call.answer(status, encode(error(request_id, code, message)))


async def _session(call: Call, version_header: str | None) -> SessionClaims | None:
    """The request's session, or None after answering 400/404."""
    session_id = call.headers.get("mcp-session-id")
    if session_id is None:
        await _bad(
            call, 400, INVALID_REQUEST, "MCP-Session-Id header is required: call initialize first"
        )
        return None
    try:
        claims = call.state.sessions.verify(session_id.strip())
    except MalformedSessionId as exc:
        await _bad(call, 400, INVALID_REQUEST, str(exc))
        return None
    if (
        claims is None
        or claims.key_id != call.key.id
        or claims.agent_id != call.agent.id
        or session_hash(session_id.strip()) in call.state.refresher.terminated
    ):
        await _bad(
            call, 404, INVALID_REQUEST, "session not found: it ended or expired; initialize again"
        )
        return None
    if version_header is not None and version_header != claims.protocol_version:
        await _bad(
            call,
            400,
            INVALID_REQUEST,
            f"MCP-Protocol-Version {version_header} differs from the session's {claims.protocol_version}",
        )
        return None
    return claims


async def _post(call: Call, version_header: str | None) -> None:
    if not json_content(call.headers):
        await _bad(call, 400, INVALID_REQUEST, "Content-Type must be application/json")
        return
    accepted = accepts(call.headers)
    if accepted is None:
        await _bad(
            call, 400, INVALID_REQUEST, "Accept must allow application/json or text/event-stream"
        )
        return
    try:
        body = await read_body(call.receive, call.state.settings.max_body_bytes)
    except BodyTooLarge:
        await _bad(call, 413, INVALID_REQUEST, "request body too large")
        return
    try:
        value = decode(body)
    except msgspec.DecodeError as exc:
        await _bad(call, 400, PARSE_ERROR, f"Parse error: {exc}")
        return
    if isinstance(value, list):
        await _batch(call, value, version_header)
        return
    try:
        message = parse_message(value)
    except InvalidMessage as exc:
        await _bad(call, 400, INVALID_REQUEST, str(exc), exc.request_id)
        return
    call.rpc_method = message.method or "response"
    if message.method == "initialize":
        if await call.admit("other", message.id):
            await _initialize(call, message)
        return
    claims = await _session(call, version_header)
    if claims is None:
        return
    kind: MethodClass = "tools_call" if message.method == "tools/call" else "other"
    if not await call.admit(kind, message.id):
        return
    if not message.is_request:
        await call.answer(202)
        return
    await call.reply(await _dispatch(call, message))


async def _batch(call: Call, items: list[Any], version_header: str | None) -> None:
    call.rpc_method = "batch"
    claims = await _session(call, version_header)
    if claims is None:
        return
    if claims.protocol_version != BATCH_VERSION or not items:
        await _bad(call, 400, INVALID_REQUEST, "JSON-RPC batches exist only in protocol 2025-03-26")
        return
    calls = sum(
        1 for item in items if isinstance(item, dict) and item.get("method") == "tools/call"
    )
    if calls and not await call.admit("tools_call", cost=calls):
        return
    if len(items) > calls and not await call.admit("other", cost=len(items) - calls):
        return
    answers: list[bytes] = []
    for item in items:
        try:
            message = parse_message(item)
        except InvalidMessage as exc:
            answers.append(encode(error(exc.request_id, INVALID_REQUEST, str(exc))))
            continue
        if message.method == "initialize":
            answers.append(
                encode(error(message.id, INVALID_REQUEST, "initialize cannot be batched"))
            )
        elif message.is_request:
            answers.append(await _dispatch(call, message))
    if not answers:
        await call.answer(202)
        return
    await call.reply(b"[" + b",".join(answers) + b"]")


async def _initialize(call: Call, message: Message) -> None:
    if not message.is_request:
        await _bad(call, 400, INVALID_REQUEST, "initialize must be a request with an id")
        return
    requested = message.params.get("protocolVersion")
    negotiated = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[-1]
    answer: dict[str, Any] = {
        "protocolVersion": negotiated,
        "capabilities": {"tools": {"listChanged": True}},
        "serverInfo": server_info(call.agent),
    }
    if call.agent.description:
        answer["instructions"] = call.agent.description
    session_id = call.state.sessions.issue(call.key.id, call.agent.id, negotiated)
    log.info("session_opened", protocol_version=negotiated)
    await call.reply(encode(result(message.id, answer)), {"MCP-Session-Id": session_id})


async def _dispatch(call: Call, message: Message) -> bytes:
    """The JSON-RPC response to one request (errors inside HTTP 200)."""
    method = message.method
    if method == "ping":
        return encode(result(message.id, {}))
    if method == "tools/list":
        try:
            return tools_list_response(message.id, call.agent, message.params.get("cursor"))
        except BadCursor as exc:
            return encode(error(message.id, INVALID_PARAMS, str(exc)))
    if method == "tools/call":
        return await tools_call(call, message, modern=False)
    return encode(error(message.id, METHOD_NOT_FOUND, f"Method not found: {method}"))


async def _listen(call: Call, version_header: str | None) -> None:
    """GET: a server-to-client stream carrying notifications/tools/list_changed."""
    call.rpc_method = "GET"
    accepted = accepts(call.headers)
    if accepted is None or not accepted[1]:
        await _bad(call, 400, INVALID_REQUEST, "GET needs Accept: text/event-stream")
        return
    claims = await _session(call, version_header)
    if claims is None or not await call.admit("other"):
        return
    digest = session_hash((call.headers.get("mcp-session-id") or "").strip())
    terminated = call.state.refresher.terminated
    REQUESTS.labels("GET", "200").inc()
    await serve_stream(
        call.state.streams,
        call.agent.id,
        call.receive,
        call.send,
        first=None,
        render=lambda event: _LIST_CHANGED if event == LIST_CHANGED else None,
        ended=lambda: digest in terminated,
    )


async def _delete(call: Call, version_header: str | None) -> None:
    """End the session on every replica: the termination list row plus a NOTIFY."""
    call.rpc_method = "DELETE"
    claims = await _session(call, version_header)
    if claims is None or not await call.admit("other"):
        return
    digest = session_hash((call.headers.get("mcp-session-id") or "").strip())
    expires = call.state.sessions.expires_at(claims)

    async def record() -> None:
        async with call.state.pool.connection(timeout=5) as conn:
            await conn.execute(
                """INSERT INTO mcp_session_terminations (session_hash, expires_at)
                   VALUES (%s, %s) ON CONFLICT (session_hash) DO NOTHING""",
                (digest, datetime.fromtimestamp(expires, UTC)),
            )
            await conn.execute("SELECT pg_notify('crank_sessions', '')")

    recorded = call.state.refresher.database_reachable  # fail fast during an outage
    try:
        if recorded:
            await within(5, record())  # a hard bound, even if the server stopped answering
    except (psycopg.Error, TimeoutError):
        log.warning("session_delete_failed", exc_info=True)
        recorded = False
    if not recorded:
        await _bad(call, 503, INTERNAL_ERROR, "cannot end the session now; retry")
        return
    call.state.refresher.note_termination(digest, expires)
    log.info("session_ended")
    await call.answer(204)
