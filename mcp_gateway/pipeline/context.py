"""What one tools/call hands its safety gates and its upstream step.

Built once per call by mcp_gateway.pipeline.calls from the call's request and the
pipeline's process-wide parts, so that the gates (confirmation, elicitation,
approval_gate, idempotency) depend on these few values and not on the whole
process state.
"""

from __future__ import annotations

import msgspec
from psycopg_pool import AsyncConnectionPool

from mcp_gateway.catalog.snapshot import Agent
from mcp_gateway.pipeline.confirmation_tokens import ConfirmationSigner
from mcp_gateway.vocabulary.requesters import Requester
from shared.db import Connection
from shared.engine.errors import Language
from shared.engine.outbound import UpstreamExecutor
from shared.settings import Settings


class Parts(msgspec.Struct, frozen=True, kw_only=True):
    """What every call's gates share: built once per process (mcp_gateway.pipeline.calls)."""

    settings: Settings  # the gates read the approval and idempotency periods, the language
    pool: AsyncConnectionPool[Connection]
    executor: UpstreamExecutor
    confirmations: ConfirmationSigner  # ct_ tokens
    request_states: ConfirmationSigner  # the requestState of a confirmation asked of the human


# A frozen msgspec Struct, not a dataclass: built on every tools/call, and a frozen
# dataclass costs several microseconds to build.
class ToolCallContext(msgspec.Struct, frozen=True):
    """The call's own values and the process-wide parts; built once per tools/call."""

    agent: Agent
    requester: Requester
    request_id: str
    parts: Parts

    @property
    def language(self) -> Language:
        return self.parts.settings.language

    @property
    def pool(self) -> AsyncConnectionPool[Connection]:
        return self.parts.pool

    @property
    def executor(self) -> UpstreamExecutor:
        return self.parts.executor

    @property
    def confirmations(self) -> ConfirmationSigner:
        return self.parts.confirmations

    @property
    def request_states(self) -> ConfirmationSigner:
        return self.parts.request_states
