"""tools/call as both eras speak it: the request read into a ``CallRequest``, the
pipeline's outcome rendered (docs/architecture.md, "The call outcome").

Protocol faults are JSON-RPC errors inside HTTP 200 in both eras: an unknown
tool (clients read a 404 on POST as "session gone") and a malformed
``inputResponses``. Everything the model can act on is a tool result.
"""

from __future__ import annotations

from typing import Any

from mcp_gateway.catalog.snapshot import Tool
from mcp_gateway.pipeline.calls import AskInResult, AskOnStream, CallRequest, HumanChannel
from mcp_gateway.pipeline.elicitation import ACTIONS, Action, Answer
from mcp_gateway.pipeline.outcomes import code, is_error
from mcp_gateway.transport.auth import insufficient_scope
from mcp_gateway.transport.errors import MethodError
from mcp_gateway.transport.exchange import Exchange
from mcp_gateway.transport.results import REQUEST_KEY, render
from mcp_gateway.transport.tasks import declares_tasks
from mcp_gateway.vocabulary.jsonrpc import INVALID_PARAMS, Message
from mcp_gateway.vocabulary.versions import META_CAPABILITIES


def declares_form(capabilities: Any) -> bool:
    """Client capabilities that declare form elicitation (``{}`` means form, as the
    specification says)."""
    elicitation = capabilities.get("elicitation") if isinstance(capabilities, dict) else None
    return isinstance(elicitation, dict) and (not elicitation or "form" in elicitation)


def _read_answer(params: dict[str, Any]) -> Answer | None:
    """A 2026-07-28 retry's answer to the confirmation form, None on a first call;
    MethodError (-32602) when ``inputResponses`` is not of the specification's shape."""
    state = params.get("requestState")
    responses = params.get("inputResponses")
    if responses is not None and not isinstance(responses, dict):
        raise MethodError(INVALID_PARAMS, "params.inputResponses must be an object")
    response = (responses or {}).get(REQUEST_KEY)
    action: Action | None = None
    if response is not None:
        if not isinstance(response, dict) or response.get("action") not in ACTIONS:
            raise MethodError(
                INVALID_PARAMS,
                f"params.inputResponses.{REQUEST_KEY}.action must be accept, decline or cancel",
            )
        action = response["action"]
    if state is None:
        return None  # answers without a state belong to no question of ours
    return Answer(state=state, action=action)


def _human(exchange: Exchange, message: Message, tool: Tool, *, legacy: bool) -> HumanChannel:
    """How the confirmation of this call (of a tool that needs one) reaches the human,
    when the agent allows it
    (``confirmation_mode: auto``) and the client declared form elicitation; None:
    the ``ct_`` token flow."""
    if exchange.agent.confirmation_mode != "auto":
        return None
    if legacy:  # (docs/architecture.md, "Asking the human in the 2025 era")
        session = exchange.elicitation_session
        return AskOnStream(session) if session is not None and exchange.sse_ok else None
    if not declares_form(message.meta.get(META_CAPABILITIES)):
        return None
    return AskInResult(_read_answer(message.params))


def _progress_token(message: Message) -> str | int | None:
    token = message.meta.get("progressToken")
    return token if isinstance(token, str | int) and not isinstance(token, bool) else None


async def tools_call(exchange: Exchange, message: Message, legacy: bool) -> dict[str, Any]:
    """The result of one tools/call; MethodError for an unknown tool or a malformed answer."""
    name = message.params.get("name")
    tool = exchange.agent.by_name.get(name) if isinstance(name, str) else None
    trace = exchange.trace
    if tool is None:
        if trace is not None:
            trace.rpc_error(INVALID_PARAMS, "unknown tool")
        raise MethodError(INVALID_PARAMS, f"Unknown tool: {name}")
    scopes = exchange.requester.scopes
    if scopes is not None and not tool.scopes <= scopes:
        # HTTP 403, not a tool error: the client can ask for the scopes and retry.
        raise insufficient_scope(exchange.agent, tool.scopes)
    human = (
        _human(exchange, message, tool, legacy=legacy)
        if tool.compiled.confirmation_required
        else None
    )
    # A client that follows a task polls it instead of waiting on the open call
    # (docs/architecture.md, "Tasks").
    as_task = not legacy and declares_tasks(message.meta)
    outcome = await exchange.state.pipeline.call(
        CallRequest(
            agent=exchange.agent,
            requester=exchange.requester,
            request_id=exchange.request_id,
            tool=tool,
            arguments=message.params.get("arguments"),
            channel=exchange,
            human=human,
            progress_token=_progress_token(message) if exchange.sse_ok and not as_task else None,
            as_task=as_task,
        )
    )
    if trace is not None:
        logged, approval_id = code(outcome)
        trace.tool_call(tool.name, tool.version, logged, approval_id, is_error(outcome))
    return render(outcome, exchange.rendering(legacy))
