"""Performing an approval's stored request: rebuilt, checked, sent, selected, accounted.

``Performer.perform`` rebuilds the request (stored with its secrets masked) from the
operation version, the stored arguments and the workspace's current secrets, sends it
only if it equals the stored one modulo the masked values, and accounts the run as a
tools/call is (docs/architecture.md, "The path of an approval").
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import re2
import structlog
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.approvals import store
from mcp_gateway.approvals.store import Claimed
from mcp_gateway.catalog.snapshot import Snapshot
from mcp_gateway.catalog.workspace_state import WorkspaceState
from mcp_gateway.request_ids import new_request_id
from mcp_gateway.upkeep.accounting import CallClock, Caller, account_call
from mcp_gateway.upkeep.call_log import CallLogWriter
from shared import tracing
from shared.crypto import SecretBox
from shared.db import Connection
from shared.engine.compiler import CompiledOperation, compile_operation
from shared.engine.egress import EgressPolicy
from shared.engine.errors import ErrorCode, Language, ToolError
from shared.engine.masking import MASK, Masker
from shared.engine.outbound import UpstreamExecutor
from shared.engine.request_builder import BuiltRequest
from shared.engine.spec import operation_from_builtins
from shared.engine.upstream import UpstreamCall
from shared.periodic import EXPECTED
from shared.principals import log_fields

log = structlog.get_logger(__name__)

UPSTREAM_TEXT_CHARS = 2000
_COMPILED_CACHE = 256
_EXHAUSTED: Mapping[Language, str] = {
    "en": "Crank failed to complete the call: every attempt ended before a result was recorded.",
    "ru": "Crank не смог выполнить вызов: каждая попытка прервалась до записи результата.",
}


def exhausted_payload(language: Language = "en") -> dict[str, Any]:
    """The ``failed`` payload of a row whose every attempt ended before a result was recorded."""
    return _payload("internal_error", _EXHAUSTED[language])


def _payload(
    code: ErrorCode, message: str, status: int | None = None, text: str | None = None
) -> dict[str, Any]:
    """A ``failed`` row's ``response_payload`` (a ``completed`` one holds the selected result)."""
    return {
        "error_code": code,
        "message": message,
        "upstream_status": status,
        "upstream_text": text,
    }


def upstream_text(body: bytes, masker: Masker) -> str:
    """The upstream's body for an approval record: masked, then cut to UPSTREAM_TEXT_CHARS."""
    text, _ = masker.excerpt(body, UPSTREAM_TEXT_CHARS)
    return text


def _matches(stored: Any, actual: Any) -> bool:
    """``actual`` equals ``stored`` where each masked run in ``stored`` stands for any text."""
    if not isinstance(stored, str) or not isinstance(actual, str) or MASK not in stored:
        return bool(stored == actual)
    # RE2: one ".+" per masked run, and a backtracking engine would take
    # polynomial time in the number of runs (docs/architecture.md, "Schema patterns").
    pattern = "(?s)" + ".+".join(re2.escape(part) for part in stored.split(MASK))
    return re2.fullmatch(pattern, actual) is not None


def same_request(stored: Mapping[str, Any], built: BuiltRequest) -> bool:
    """The rebuilt request is the stored one, modulo the values masked in it; a row whose
    request differs is not sent and fails with ``internal_error``."""
    redacted = built.redacted()
    if redacted == stored:
        return True
    headers = stored.get("headers")
    if not isinstance(headers, list) or len(headers) != len(built.headers):
        return False
    body = None if built.body is None else built.body.decode("utf-8", errors="replace")
    return (
        stored.get("method") == built.method
        and stored.get("content_type") == built.content_type
        and _matches(stored.get("url"), built.url)
        and _matches(stored.get("body"), body)
        and all(
            isinstance(pair, list)
            and len(pair) == 2
            and pair[0] == name
            and _matches(pair[1], value)
            for pair, (name, value) in zip(headers, built.headers, strict=True)
        )
    )


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an approved call ended: the row's final status and its result or error payload."""

    status: store.Finished
    payload: Any
    truncated: bool = False  # completed: the selection was cut to fit


def _outcome_code(outcome: Outcome) -> str:
    """ok, or the failed call's error code (the call log's outcome)."""
    return "ok" if outcome.status == "completed" else str(outcome.payload["error_code"])


class Deferred(Exception):
    """The database failed before the upstream call: leave the row to be re-claimed once its
    lease expires; nothing is accounted."""


@dataclass(slots=True)
class _Cache:
    compiled: OrderedDict[tuple[int, int], CompiledOperation] = field(default_factory=OrderedDict)

    def get(self, key: tuple[int, int]) -> CompiledOperation | None:
        found = self.compiled.get(key)
        if found is not None:
            self.compiled.move_to_end(key)
        return found

    def put(self, key: tuple[int, int], compiled: CompiledOperation) -> None:
        self.compiled[key] = compiled
        while len(self.compiled) > _COMPILED_CACHE:
            self.compiled.popitem(last=False)


class Performer:
    """One per worker: the compiled-operation cache, where secrets come from, and
    where the calls are accounted."""

    def __init__(
        self,
        pool: AsyncConnectionPool[Connection],
        executor: UpstreamExecutor,
        *,
        snapshot: Callable[[], Snapshot],
        box: SecretBox | None,
        call_log: CallLogWriter,
        language: Language = "en",
    ) -> None:
        self._pool = pool
        self._executor = executor
        self._snapshot = snapshot
        self._workspace = WorkspaceState(pool, snapshot, box)
        self._call_log = call_log
        self._language: Language = language
        self._cache = _Cache()

    async def perform(self, row: Claimed) -> Outcome:
        """The outcome to record; raises ``Deferred`` when the database failed first."""
        request_id = new_request_id()  # this run's own: the tools/call has its own
        # Each run is a task of its own (the worker's), so these stay on its lines: who
        # asked for the approval, never a token (docs/architecture.md, "Identity").
        with structlog.contextvars.bound_contextvars(**log_fields(row.key_id, row.person)):
            return await self._traced(row, request_id)

    async def _traced(self, row: Claimed, request_id: str) -> Outcome:
        if not tracing.enabled:
            return await self._perform(row, request_id)
        with tracing.approval_span(
            approval_id=row.id,
            attempt=row.attempt,
            tool=row.tool,
            workspace=row.workspace,
            agent=row.agent,
            request_id=request_id,
            key_id=row.key_id,
            person=row.person,
        ) as span:  # the upstream call's span is its child (docs/tracing.md)
            outcome = await self._perform(row, request_id)
            span.set_attribute("crank.outcome", _outcome_code(outcome))
            return outcome

    async def _perform(self, row: Claimed, request_id: str) -> Outcome:
        clock = CallClock.now()
        upstream = clock.upstream
        try:
            compiled = await self._compiled(row)
            secrets = await self._secrets(row, compiled)
            egress = await self._egress(row)
        except EXPECTED as exc:  # the database: leave the row to be re-claimed
            raise Deferred from exc
        except Exception:  # an unreadable spec: every attempt would fail the same way
            log.exception("approval_operation_unreadable", approval_id=row.id, tool=row.tool)
            outcome = self._internal_error()
        else:
            try:
                outcome = await self._send(row, compiled, secrets, egress, upstream)
            except Exception:  # a bug: repeating would fail the same way
                log.exception("approval_call_crashed", approval_id=row.id)
                outcome = self._internal_error()
        # The row names who asked: the key, or the person's recorded principal.
        caller = Caller(
            row.workspace_id, row.agent_id, row.workspace, row.agent, row.key_id, row.person
        )
        account_call(
            self._call_log,
            caller,
            clock,
            request_id=request_id,
            tool=row.tool,
            version=row.version,
            outcome=_outcome_code(outcome),
            approval_id=row.id,
        )
        return outcome

    def _internal_error(self) -> Outcome:
        failure = ToolError.of("internal_error", language=self._language)
        return Outcome("failed", _payload(failure.error_code, failure.message))

    async def _send(
        self,
        row: Claimed,
        compiled: CompiledOperation,
        secrets: Mapping[str, str],
        egress: EgressPolicy,
        upstream: UpstreamCall,
    ) -> Outcome:
        try:
            built = compiled.build(compiled.validate(row.arguments), secrets)
        except ToolError as exc:
            return Outcome("failed", _payload(exc.error_code, exc.message))
        if not same_request(row.request, built):
            log.error("approval_request_changed", approval_id=row.id, tool=row.tool)
            return self._internal_error()
        try:
            selected = await compiled.call(self._executor, built, upstream, egress=egress)
        except ToolError as exc:
            response = upstream.response
            text = None if response is None else upstream_text(response.body, built.masker)
            return Outcome("failed", _payload(exc.error_code, exc.message, upstream.status, text))
        return Outcome("completed", selected.value, truncated=selected.truncated)

    async def _compiled(self, row: Claimed) -> CompiledOperation:
        """The row's operation version (immutable): the snapshot's compiled tool when it is
        that version, else loaded and compiled once (kept, least recently used out)."""
        key = (row.operation_id, row.version)
        agent = self._snapshot().agents_by_id.get(row.agent_id)
        tool = agent.by_name.get(row.tool) if agent is not None else None
        if tool is not None and (tool.operation_id, tool.version) == key:
            return tool.compiled
        compiled = self._cache.get(key)
        if compiled is None:
            async with self._pool.connection() as conn:
                raw = await store.load_spec(conn, *key)
            compiled = compile_operation(operation_from_builtins(raw), language=self._language)
            self._cache.put(key, compiled)
        return compiled

    async def _egress(self, row: Claimed) -> EgressPolicy:
        """The workspace's current egress policy: the snapshot's, else the database's."""
        return await self._workspace.egress(row.agent_id, row.workspace_id)

    async def _secrets(self, row: Claimed, compiled: CompiledOperation) -> Mapping[str, str]:
        """The workspace's current secrets: the snapshot's, else opened from the database."""
        if compiled.spec.request.auth is None:
            return {}
        return await self._workspace.secrets(row.agent_id, row.workspace_id)
