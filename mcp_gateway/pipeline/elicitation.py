"""The DELETE confirmation asked of the human through a 2026-07-28 client.

``confirm`` answers a first call with the form and a signed ``rs_`` request state
(``AskHuman``) and judges the retry's answer; ``form_message`` is the form's text,
the 2025 era's too (docs/architecture.md, "DELETE confirmation").
"""

from __future__ import annotations

from typing import Any, Literal, get_args

import msgspec
import structlog

from mcp_gateway.catalog.snapshot import Tool
from mcp_gateway.pipeline import confirmation
from mcp_gateway.pipeline.confirmation_tokens import InvalidToken
from mcp_gateway.pipeline.context import ToolCallContext
from mcp_gateway.pipeline.outcomes import AskHuman
from shared.engine.errors import Language, ToolError
from shared.engine.masking import workspace_masker

log = structlog.get_logger(__name__)

_VALUE_CHARS = 200  # an argument value is cut here in the form
_DESCRIPTION_CHARS = 300
_MAX_ARGUMENTS_SHOWN = 20

Action = Literal["accept", "decline", "cancel"]
ACTIONS: frozenset[str] = frozenset(get_args(Action))  # the form's answers


class Answer(msgspec.Struct, frozen=True):
    """What a retry carries: the echoed ``requestState`` and the form's action, if any."""

    state: Any  # attacker-controlled: checked by the signer
    action: Action | None


async def confirm(
    ctx: ToolCallContext, tool: Tool, arguments: dict[str, Any], answer: Answer | None
) -> AskHuman | None:
    """None when the human accepted this exact call (the state is then used up);
    otherwise the question to put to them (an ``InputRequiredResult``). Raises ToolError
    ``confirmation_declined`` or ``confirmation_invalid``.

    ``arguments`` are the validated arguments, without any ``ct_`` token (a
    token sent by such a client is ignored: only the human confirms)."""
    context = confirmation.bound_to(ctx, tool, arguments) | {"requester_id": ctx.requester.id}
    if answer is not None:
        state = answer.state if isinstance(answer.state, str) else ""
        try:
            use = ctx.request_states.verify(state, **context)
        except InvalidToken as exc:
            log.info("elicitation_refused", tool=tool.name, reason=exc.reason)
            raise confirmation.invalid(exc.reason, ctx.language) from None
        if not await confirmation.mark_used(ctx, use):
            log.info("elicitation_refused", tool=tool.name, reason="used")
            raise confirmation.invalid("used", ctx.language)
        if answer.action == "accept":
            log.info("elicitation_accepted", tool=tool.name, version=tool.version)
            return None
        if answer.action is not None:
            log.info("elicitation_declined", tool=tool.name, action=answer.action)
            raise ToolError.of(
                "confirmation_declined", language=ctx.language, details={"action": answer.action}
            )
    log.info("elicitation_asked", tool=tool.name, version=tool.version)
    return AskHuman(form_message(ctx, tool, arguments), ctx.request_states.issue(**context))


_TEXTS: dict[Language, dict[str, str]] = {
    "en": {
        "delete": "An AI agent asks to delete something: {title}.",
        "other": "An AI agent asks to run an operation that needs your confirmation: {title}.",
        "with": "With:",
        "none": "(no arguments)",
        "more": "… and {count} more",
        "decide": "Accept to run it now. Decline to stop it; nothing is changed then.",
    },
    "ru": {
        "delete": "ИИ-агент просит удалить: {title}.",
        "other": "ИИ-агент просит выполнить операцию, которая требует вашего подтверждения: {title}.",
        "with": "Параметры:",
        "none": "(без параметров)",
        "more": "… и ещё {count}",
        "decide": "Примите, чтобы выполнить её сейчас. Отклоните, чтобы остановить; тогда ничего не изменится.",
    },
}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def form_message(ctx: ToolCallContext, tool: Tool, arguments: dict[str, Any]) -> str:
    """What the form tells the human, in ``CRANK_LANGUAGE``: the operation's title
    and description (its author's words) and the arguments (the model's), masked.

    Values are shown as JSON, so a newline stays ``\\n`` and a value cannot pose as
    the form's own text."""
    texts = _TEXTS[ctx.language]
    spec = tool.spec
    kind = "delete" if spec.request.method == "DELETE" else "other"
    lines = [texts[kind].format(title=spec.title or tool.name)]
    if spec.description:
        lines.append(_cut(spec.description.strip(), _DESCRIPTION_CHARS))
    masker = workspace_masker(ctx.agent.secrets)
    shown = list(arguments.items())[:_MAX_ARGUMENTS_SHOWN]
    lines.append(texts["with"])
    for name, value in shown:
        encoded = msgspec.json.encode(value).decode()
        lines.append(f"  {name} = {_cut(masker.text(encoded), _VALUE_CHARS)}")
    if not shown:
        lines.append("  " + texts["none"])
    if len(arguments) > len(shown):
        lines.append("  " + texts["more"].format(count=len(arguments) - len(shown)))
    lines.append(texts["decide"])
    return "\n".join(lines)
