"""tools/call: validate → the safety gates → the upstream step → a typed outcome.

Gates run in this order (docs/architecture.md, "Gate order"): validate →
confirmation (DELETE, or ``safety.confirmation: true``: a ``ct_`` token,
mcp_gateway.pipeline.confirmation; or the human's answer to a form, in the
result for a 2026-07-28 client, mcp_gateway.pipeline.elicitation, or on the
call's stream for a 2025 one, mcp_gateway.pipeline.elicitation_stream) →
approval (mcp_gateway.pipeline.approval_gate; a client that sent a progress
token over SSE may wait on the open call, mcp_gateway.pipeline.approval_wait) →
the upstream step (``CompiledOperation.call``), through the idempotency memory
for an operation with ``execution_config.idempotency``.

Every call of a known tool, success or tool error, leaves one call log row
(buffered) and counts in the per-tool metrics; a plain call makes no database
round trip, while the safety gates write their rows before going on.
"""

from __future__ import annotations

from typing import Any

import msgspec
import structlog
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals import tasks as approval_tasks
from mcp_gateway.approvals.waiters import ApprovalWaiters
from mcp_gateway.catalog.snapshot import Agent, Tool
from mcp_gateway.pipeline import approval_gate, confirmation, elicitation, elicitation_stream
from mcp_gateway.pipeline import idempotency as idempotency_memory
from mcp_gateway.pipeline.approval_wait import ApprovalWait
from mcp_gateway.pipeline.channel import ClientChannel
from mcp_gateway.pipeline.confirmation_tokens import ConfirmationSigner
from mcp_gateway.pipeline.context import Parts, ToolCallContext
from mcp_gateway.pipeline.outcomes import (
    CallOutcome,
    Completed,
    Failed,
    PendingApproval,
    TaskCreated,
    code,
)
from mcp_gateway.upkeep.accounting import CallClock, Caller, account_call
from mcp_gateway.upkeep.call_log import CallLogWriter
from mcp_gateway.vocabulary.requesters import Requester
from shared.db import Connection
from shared.engine.compiler import confirmation_token
from shared.engine.errors import ToolError
from shared.engine.outbound import UpstreamExecutor
from shared.engine.request_builder import BuiltRequest
from shared.engine.upstream import UpstreamCall, UpstreamFailure
from shared.settings import Settings

log = structlog.get_logger(__name__)


class AskInResult(msgspec.Struct, frozen=True):
    """A 2026-07-28 client that declared elicitation: asked in the call's result."""

    answer: elicitation.Answer | None  # None: the first call, or a retry without a state


class AskOnStream(msgspec.Struct, frozen=True):
    """A 2025 session that declared elicitation and takes an SSE answer: asked on it."""

    session: bytes  # the session's hash: the answer must come from it


# How a confirmation is obtained; None: the ct_ token the model sends back.
HumanChannel = AskInResult | AskOnStream | None


class CallRequest(msgspec.Struct, frozen=True, kw_only=True):
    """One tools/call of a known tool, as transport read it."""

    agent: Agent
    requester: Requester
    request_id: str
    tool: Tool
    arguments: Any  # as sent: absent or null is no arguments, validated by the tool
    channel: ClientChannel  # the open answer, for progress and 2025 forms
    human: HumanChannel = None
    progress_token: str | int | None = None  # set when the client takes an SSE answer
    as_task: bool = False  # a pending approval is answered as a task


class Pipeline:
    """One per process: what every tools/call needs beyond its request."""

    def __init__(
        self,
        settings: Settings,
        *,
        pool: AsyncConnectionPool[Connection],
        executor: UpstreamExecutor,
        confirmations: ConfirmationSigner,
        request_states: ConfirmationSigner,
        approval_waiters: ApprovalWaiters,
        answer_waiters: ApprovalWaiters,
        call_log: CallLogWriter,
    ) -> None:
        self._settings = settings
        self._parts = Parts(
            settings=settings,
            pool=pool,
            executor=executor,
            confirmations=confirmations,
            request_states=request_states,
        )
        self._approval_waiters = approval_waiters
        self._answer_waiters = answer_waiters
        self._call_log = call_log

    async def call(self, request: CallRequest) -> CallOutcome:
        """The outcome of one tools/call, accounted (call log row and metrics)."""
        ctx = ToolCallContext(request.agent, request.requester, request.request_id, self._parts)
        tool = request.tool
        clock = CallClock.now()
        upstream = clock.upstream
        outcome: CallOutcome
        try:
            outcome = await self._run(ctx, request, upstream)
        except ToolError as exc:
            if isinstance(exc, UpstreamFailure):
                log.info(
                    "tool_call_failed",
                    tool=tool.name,
                    error_code=exc.error_code,
                    attempts=upstream.attempts,
                    reason=exc.details.get("reason"),  # masked; e.g. which host egress refused
                )
            outcome = Failed(exc)
        except Exception:
            log.exception("tool_call_crashed", tool=tool.name)
            outcome = Failed(ToolError.of("internal_error", language=ctx.language))
        logged, approval_id = code(outcome)
        agent = ctx.agent
        requester = ctx.requester
        caller = Caller(
            agent.workspace_id,
            agent.id,
            agent.workspace,
            agent.slug,
            requester.key_id,
            requester.recorded,
        )
        account_call(
            self._call_log,
            caller,
            clock,
            request_id=ctx.request_id,
            tool=tool.name,
            version=tool.version,
            outcome=logged,
            approval_id=approval_id,
        )
        return outcome

    async def record_answer(self, request_id: Any, answer: Any, session_digest: bytes) -> None:
        """A 2025 client's response to a confirmation form asked on some call's stream."""
        await elicitation_stream.record(
            self._parts.pool, self._answer_waiters, request_id, answer, session_digest
        )

    async def _run(
        self, ctx: ToolCallContext, request: CallRequest, upstream: UpstreamCall
    ) -> CallOutcome:
        tool = request.tool
        compiled = tool.compiled
        cleaned = compiled.validate(request.arguments)
        if compiled.confirmation_required:
            human = request.human
            if human is None:
                token = confirmation_token(request.arguments)
                await confirmation.check(ctx, tool, cleaned, token)
            elif isinstance(
                human, AskOnStream
            ):  # (docs/architecture.md, "Asking the human in the 2025 era")
                await elicitation_stream.ask(
                    ctx,
                    tool,
                    cleaned,
                    request.channel,
                    human.session,
                    self._answer_waiters,
                    self._settings.elicitation_ttl_s,
                )
            else:  # no ct_ token for such a client (docs/architecture.md, "DELETE confirmation")
                asking = await elicitation.confirm(ctx, tool, cleaned, human.answer)
                if asking is not None:
                    return asking
        built = compiled.build(cleaned, ctx.agent.secrets)
        if tool.spec.safety.approval:
            return await self._approval(ctx, request, cleaned, built)
        idempotency = tool.spec.execution_config.idempotency
        if idempotency is not None:
            key = str(cleaned[idempotency.argument])
            return await idempotency_memory.run(
                ctx, tool, cleaned, key, lambda: self._send(ctx, tool, built, upstream)
            )
        return await self._send(ctx, tool, built, upstream)

    async def _approval(
        self, ctx: ToolCallContext, request: CallRequest, arguments: Any, built: BuiltRequest
    ) -> CallOutcome:
        """The approval gate's answer; a pending one as a task, or waited on."""
        tool = request.tool
        answer = await approval_gate.request_approval(ctx, tool, arguments, built)
        if not isinstance(answer, PendingApproval):
            return answer
        if (
            request.as_task
        ):  # a task instead of the seed's structure (docs/architecture.md, "Tasks")
            task = await approval_tasks.created(
                ctx.pool,
                ctx.agent.id,
                answer.approval_id,
                ctx.parts.settings.approval_outcome_retention_s,
                ctx.language,
            )
            return TaskCreated(task)
        wait = self._wait(request)
        if wait is None:
            return answer
        return await wait.answer(
            answer, lambda: approval_gate.request_approval(ctx, tool, arguments, built)
        )

    def _wait(self, request: CallRequest) -> ApprovalWait | None:
        """How this call waits for its approval's decision; None: it answers at once."""
        token = request.progress_token
        if token is None:
            return None
        wait_s = self._settings.approval_wait_s
        if request.agent.approval_wait_s is not None:  # an agent may only lower it
            wait_s = min(wait_s, request.agent.approval_wait_s)
        if wait_s <= 0 or self._approval_waiters.closing:
            return None
        return ApprovalWait(
            request.channel, self._approval_waiters, token, wait_s, self._settings.language
        )

    async def _send(
        self, ctx: ToolCallContext, tool: Tool, built: BuiltRequest, upstream: UpstreamCall
    ) -> Completed:
        selected = await tool.compiled.call(ctx.executor, built, upstream, egress=ctx.agent.egress)
        log.info(
            "tool_called",
            tool=tool.name,
            version=tool.version,
            status=upstream.status,
            attempts=upstream.attempts,
            elapsed_ms=upstream.elapsed_ms,
        )
        return Completed(selected.value, truncated=selected.truncated)
