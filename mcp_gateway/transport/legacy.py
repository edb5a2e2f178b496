"""The legacy protocol era (2025-03-26, 2025-06-18, 2025-11-25): initialize and sessions.

Sessions are signed ids (mcp_gateway.sessions.signer): any replica checks one without
the database. A request inside a session without ``MCP-Protocol-Version`` uses
the session's negotiated version (docs/architecture.md, "Seed curl sequence"); one whose
header differs gets 400. Batches exist only in 2025-03-26.
"""

from __future__ import annotations

from typing import Any

import msgspec
import structlog

from mcp_gateway.sessions.signer import MalformedSessionId, SessionClaims, session_hash
from mcp_gateway.sessions.terminations import NotRecorded
from mcp_gateway.transport import methods
from mcp_gateway.transport.calls import declares_form
from mcp_gateway.transport.checks import BATCHES_REFUSED, read_request, require_event_stream
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.exchange import Exchange
from mcp_gateway.transport.listing import server_info
from mcp_gateway.transport.rate_limits import MethodClass
from mcp_gateway.transport.streams import LIST_CHANGED
from mcp_gateway.vocabulary.jsonrpc import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    InvalidMessage,
    Message,
    RequestId,
    encode,
    error,
    parse_message,
    result,
)
from mcp_gateway.vocabulary.versions import BATCH_VERSION, LEGACY_VERSIONS

log = structlog.get_logger(__name__)

ELICITATION_VERSIONS = ("2025-06-18", "2025-11-25")  # elicitation/create exists from 2025-06-18

_LIST_CHANGED = encode({"jsonrpc": "2.0", "method": LIST_CHANGED})


class Session(msgspec.Struct, frozen=True, array_like=True):
    """A request's verified session (a Struct: built on every session request)."""

    claims: SessionClaims
    digest: bytes  # what the termination list holds: the id's hash, never the id


async def handle(exchange: Exchange, method: str, version_header: str | None) -> None:
    if method == "POST":
        await _post(exchange, version_header)
    elif method == "GET":
        await _listen(exchange, version_header)
    else:
        await _delete(exchange, version_header)


def _session(exchange: Exchange, version_header: str | None) -> Session:
    """The request's session; 400 when missing or malformed, 404 when unknown or ended."""
    session_id = exchange.headers.get("mcp-session-id")
    if session_id is None:
        raise ProtocolError(
            400,
            "MCP-Session-Id header is required: call initialize first",
            code=INVALID_REQUEST,
        )
    session_id = session_id.strip()
    try:
        claims = exchange.state.sessions.verify(session_id)
    except MalformedSessionId as exc:
        raise ProtocolError(400, str(exc), code=INVALID_REQUEST) from None
    digest = session_hash(session_id)
    if (
        claims is None
        or claims.requester_id != exchange.requester.id
        or claims.agent_id != exchange.agent.id
        or digest in exchange.state.ended_sessions.ended
    ):
        raise ProtocolError(
            404,
            "session not found: it ended or expired; initialize again",
            code=INVALID_REQUEST,
        )
    if version_header is not None and version_header != claims.protocol_version:
        raise ProtocolError(
            400,
            f"MCP-Protocol-Version {version_header} differs from the session's "
            f"{claims.protocol_version}",
            code=INVALID_REQUEST,
        )
    return Session(claims, digest)


async def _post(exchange: Exchange, version_header: str | None) -> None:
    message = await read_request(exchange, batches=True)
    if isinstance(message, list):
        await _batch(exchange, message, version_header)
        return
    exchange.rpc_method = message.method or "response"
    if message.method == "initialize":
        exchange.admit("other", message.id)
        await _initialize(exchange, message)
        return
    session = _session(exchange, version_header)
    kind: MethodClass = "tools_call" if message.method == "tools/call" else "other"
    exchange.admit(kind, message.id)
    if message.method is None:  # a response: perhaps the human's answer to a form
        await exchange.state.pipeline.record_answer(message.id, message.params, session.digest)
    if not message.is_request:
        await exchange.answer(202)
        return
    if session.claims.elicitation:
        exchange.elicitation_session = session.digest
    await exchange.reply(await methods.answer(exchange, message, legacy=True))


async def _batch(exchange: Exchange, items: list[Any], version_header: str | None) -> None:
    """A 2025-03-26 batch: at most ``CRANK_MCP_MAX_BATCH_ITEMS`` messages, admitted at once;
    once the answers reach ``CRANK_MCP_MAX_BATCH_ANSWER_BYTES`` the remaining requests are
    not run and each gets an error saying so (docs/mcp-interface.md, "Rules inside a
    session")."""
    exchange.rpc_method = "batch"
    exchange.sse_ok = False  # one JSON array answers a batch: no call in it waits
    claims = _session(exchange, version_header).claims
    if claims.protocol_version != BATCH_VERSION or not items:
        raise ProtocolError(400, BATCHES_REFUSED, code=INVALID_REQUEST)
    settings = exchange.state.settings
    if len(items) > settings.mcp_max_batch_items:
        raise ProtocolError(
            400,
            f"a batch holds at most {settings.mcp_max_batch_items} messages, this one "
            f"{len(items)}; send smaller batches",
            code=INVALID_REQUEST,
            data={"max_batch_items": settings.mcp_max_batch_items, "batch_items": len(items)},
        )
    calls = sum(
        1 for item in items if isinstance(item, dict) and item.get("method") == "tools/call"
    )
    exchange.admit_all({"tools_call": calls, "other": len(items) - calls})
    budget = settings.mcp_max_batch_answer_bytes
    answers: list[bytes] = []
    size = 0
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
        elif message.is_request and size >= budget:
            answers.append(_not_run(message.id, budget))
        elif message.is_request:
            answer = await methods.answer(exchange, message, legacy=True)
            size += len(answer)
            answers.append(answer)
    if not answers:
        await exchange.answer(202)
        return
    await exchange.reply(b"[" + b",".join(answers) + b"]")


def _not_run(request_id: RequestId | None, budget: int) -> bytes:
    return encode(
        error(
            request_id,
            INVALID_REQUEST,
            f"not run: this batch's answers reached {budget} bytes; send this request again "
            "alone or in a smaller batch",
            {"max_batch_answer_bytes": budget},
        )
    )


async def _initialize(exchange: Exchange, message: Message) -> None:
    if not message.is_request:
        raise ProtocolError(400, "initialize must be a request with an id", code=INVALID_REQUEST)
    requested = message.params.get("protocolVersion")
    negotiated = requested if requested in LEGACY_VERSIONS else LEGACY_VERSIONS[-1]
    answer: dict[str, Any] = {
        "protocolVersion": negotiated,
        "capabilities": {"tools": {"listChanged": True}},
        "serverInfo": server_info(exchange.agent),
    }
    if exchange.agent.description:
        answer["instructions"] = exchange.agent.description
    session_id = exchange.state.sessions.issue(
        exchange.requester.id,
        exchange.agent.id,
        negotiated,
        elicitation=negotiated in ELICITATION_VERSIONS
        and declares_form(message.params.get("capabilities")),
    )
    log.info("session_opened", protocol_version=negotiated)
    await exchange.reply(encode(result(message.id, answer)), {"MCP-Session-Id": session_id})


async def _listen(exchange: Exchange, version_header: str | None) -> None:
    """GET: a server-to-client stream carrying notifications/tools/list_changed."""
    exchange.rpc_method = "GET"
    require_event_stream(exchange.headers, "GET")
    digest = _session(exchange, version_header).digest
    exchange.admit("other")
    ended = exchange.state.ended_sessions.ended
    await exchange.stream(
        "GET",
        None,
        lambda event: _LIST_CHANGED if event == LIST_CHANGED else None,
        lambda: digest in ended,
    )


async def _delete(exchange: Exchange, version_header: str | None) -> None:
    """End the session on every replica (mcp_gateway.sessions.terminations)."""
    exchange.rpc_method = "DELETE"
    session = _session(exchange, version_header)
    claims, digest = session.claims, session.digest
    exchange.admit("other")
    try:
        await exchange.state.ended_sessions.end(digest, exchange.state.sessions.expires_at(claims))
    except NotRecorded:
        raise ProtocolError(503, "cannot end the session now; retry", code=INTERNAL_ERROR) from None
    log.info("session_ended")
    await exchange.answer(204)
