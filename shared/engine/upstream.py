"""The vocabulary of the upstream step (``CompiledOperation.call``).

``UpstreamCall`` is what the step measured, filled in as it goes so that the call
log has the status, attempts and time also when the step raises.
``upstream_failure`` is the one place where an executor failure
(shared.engine.outbound.OutboundError) becomes a tool error, as httpx maps transport
errors in one function; no caller of the step catches ``OutboundError``.
"""

from __future__ import annotations

from dataclasses import dataclass

from shared.engine.egress import Blocked
from shared.engine.errors import Language, ToolError
from shared.engine.masking import Masker
from shared.engine.outbound import Delivery, OutboundError, UpstreamBlocked, UpstreamResponse


@dataclass(slots=True)
class UpstreamCall:
    """What one upstream step measured (docs/architecture.md, "The upstream call step")."""

    response: UpstreamResponse | None = None  # the raw answer, when one came back
    attempts: int = 0
    elapsed_ms: float | None = None  # None: the upstream was not called

    @property
    def status(self) -> int | None:
        """The upstream's HTTP status; None when no answer came back."""
        return None if self.response is None else self.response.status


class UpstreamFailure(ToolError):
    """The tool error of a call that got no usable HTTP answer; ``delivery`` says
    whether the request can have reached the upstream."""

    delivery: Delivery = "unknown"
    # For upstream_blocked: which policy layer refused, for try-it's remedy only
    # (control_plane.services.egress_remedy). Kept off ``details``, which reach call
    # logs and approval records: which layer refused tells of the operator's settings.
    blocked: Blocked | None = None


def upstream_failure(exc: OutboundError, *, language: Language, masker: Masker) -> UpstreamFailure:
    """The tool error for an executor failure (its reason, masked, for admins only)."""
    failure = UpstreamFailure.of(
        exc.code,
        language=language,
        details={
            "upstream_status": None,
            "attempts": exc.attempts,
            "reason": masker.text(str(exc)),
        },
    )
    if isinstance(exc, UpstreamBlocked):
        failure.blocked = exc.blocked
    failure.delivery = exc.delivery
    return failure


__all__ = ["UpstreamCall", "UpstreamFailure", "upstream_failure"]
