"""The human behind an SDK client's elicitation callback, for the confirmation tests."""

from __future__ import annotations

import mcp_types
from mcp.client.session import ClientRequestContext


class Human:
    """The SDK's elicitation callback: answers every form with ``action``, keeps what it saw."""

    def __init__(self, action: str) -> None:
        self.action = action
        self.forms: list[mcp_types.ElicitRequestParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult:
        self.forms.append(params)
        return mcp_types.ElicitResult(action=self.action)  # type: ignore[arg-type]
