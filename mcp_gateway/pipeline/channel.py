"""What the pipeline may say to the client in the middle of a call.

Transport implements it for the open tools/call answer of its era (an SSE
stream); the pipeline never sees HTTP or JSON-RPC (docs/architecture.md,
"Layers of the gateway").
"""

from __future__ import annotations

from typing import Protocol


class ClientChannel(Protocol):
    async def progress(self, token: str | int, step: int, message: str) -> bool:
        """A progress notification for ``token``; False when the client has gone away."""
        ...

    async def ask(self, request_id: str, message: str) -> bool:
        """A confirmation form (``elicitation/create``) with ``message``, answered by a
        later response carrying ``request_id``; False when the client has gone away."""
        ...

    async def gone(self) -> None:
        """Returns once the client has gone away."""
        ...
