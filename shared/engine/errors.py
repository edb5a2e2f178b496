# ruff: noqa: RUF001 - the Russian messages are Cyrillic on purpose
"""Structured tool errors: the closed list of ``error_code`` values, in one place.

Every runtime failure of a tools/call reaches the model as a tool error
(``isError: true``) whose structured content is ``ToolError.to_structured()``::

    {error_code, message, recoverable, suggested_action, request_id[, retry_after_s]}

plus ``confirmation_token`` for ``confirmation_required``. ``recoverable``
tells the model whether calling again can get it what it asked for, as
``suggested_action`` says (docs/architecture.md, "Error codes"): the same call
later ("later"), or a call the model changes itself or makes anew ("again":
fixed arguments, the confirmation token, a new idempotency key, a narrower
request, a new approval). Not recoverable ("no"): the user said no, or an
administrator must change something first. Only "later" errors carry
``retry_after_s``, and only they release an idempotency key
(``ToolError.transient``). Messages and suggested actions exist in English and
Russian (``CRANK_LANGUAGE=en|ru``). Details for logs and approval records (the
failed fields and rules, the upstream status, a short masked upstream excerpt)
live in ``ToolError.details`` and never in the message.

    error_code                    recovery  when
    ----------------------------  --------  ---------------------------------------
    invalid_arguments             again     arguments fail the input schema or a
                                            path value is "", "." or ".."
    confirmation_required         again     DELETE first call; the token in the
                                            message and in confirmation_token
    confirmation_invalid          again     token or requestState unknown, used,
                                            expired or bound to other arguments
    confirmation_declined         no        the human declined or dismissed the
                                            confirmation form (elicitation)
    idempotency_conflict          again     same key, other arguments
    idempotency_in_progress       later     same key, first call still running
    upstream_rate_limited         later     HTTP 429 (retry_after_s from Retry-After)
    upstream_timeout              later     no answer within timeout_ms; HTTP 408
    upstream_unavailable          later     connect errors, HTTP 502, 503, 504
    upstream_error                later     any other HTTP 5xx
    upstream_bad_request          again     HTTP 400, 422 and any other 4xx
    upstream_auth_failed          no        HTTP 401, 403
    upstream_not_found            again     HTTP 404, 410
    upstream_conflict             again     HTTP 409
    upstream_response_invalid     no        unreadable success answer (not JSON
                                            where a selection needs JSON; 3xx)
    upstream_response_too_large   again     raw body over the limit, or the
                                            selected output over max_bytes even
                                            with every array emptied
    upstream_blocked              no        SSRF guard refused the address
    secret_missing                no        a referenced workspace secret is
                                            absent or unusable in a header
    approval_denied               no        a human denied the approval
    approval_expired              again     the approval was not decided in time
    internal_error                later     a bug or an unexpected failure in Crank

The suggested actions are in ``_TABLE`` below, next to the messages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Self, get_args

Language = Literal["en", "ru"]
ErrorCode = Literal[
    "invalid_arguments",
    "confirmation_required",
    "confirmation_invalid",
    "confirmation_declined",
    "idempotency_conflict",
    "idempotency_in_progress",
    "upstream_rate_limited",
    "upstream_timeout",
    "upstream_unavailable",
    "upstream_error",
    "upstream_bad_request",
    "upstream_auth_failed",
    "upstream_not_found",
    "upstream_conflict",
    "upstream_response_invalid",
    "upstream_response_too_large",
    "upstream_blocked",
    "secret_missing",
    "approval_denied",
    "approval_expired",
    "internal_error",
]
ERROR_CODES: tuple[ErrorCode, ...] = get_args(ErrorCode)


# How calling again can still get the model what it asked for (see above).
Recovery = Literal["later", "again", "no"]


@dataclass(frozen=True, slots=True)
class _Entry:
    recovery: Recovery
    message: Mapping[Language, str]  # str.format templates
    action: Mapping[Language, str]


# Words several codes share.
_RETRY_LATER: Mapping[Language, str] = {
    "en": "Retry the request later.",
    "ru": "Повторите запрос позже.",
}
_RETURNED_STATUS: Mapping[Language, str] = {
    "en": "The external API returned HTTP {status}.",
    "ru": "Внешний API вернул HTTP {status}.",
}

_TABLE: Mapping[ErrorCode, _Entry] = {
    "invalid_arguments": _Entry(
        "again",
        {"en": "Invalid arguments: {problems}", "ru": "Неверные аргументы: {problems}"},
        {
            "en": "Fix the arguments named in the message and call again.",
            "ru": "Исправьте аргументы, названные в сообщении, и повторите вызов.",
        },
    ),
    "confirmation_required": _Entry(
        "again",
        {
            "en": 'The operation requires confirmation. Repeat the call with _crank_confirmation_token="{token}".',
            "ru": 'Операция требует подтверждения. Повторите вызов с _crank_confirmation_token="{token}".',
        },
        {
            "en": "Confirm with the user, then repeat the same call with the same arguments plus the token.",
            "ru": "Уточните у пользователя и повторите тот же вызов с теми же аргументами и токеном.",
        },
    ),
    "confirmation_invalid": _Entry(
        "again",
        {
            "en": "The confirmation token is invalid, expired, already used or bound to other arguments.",
            "ru": "Токен подтверждения недействителен, истёк, уже использован или выдан для других аргументов.",
        },
        {
            "en": "Call again without _crank_confirmation_token to get a new token.",
            "ru": "Повторите вызов без _crank_confirmation_token, чтобы получить новый токен.",
        },
    ),
    "confirmation_declined": _Entry(
        "no",
        {
            "en": "The user did not confirm the operation; nothing was changed.",
            "ru": "Пользователь не подтвердил операцию; ничего не изменено.",
        },
        {
            "en": "Do not repeat the call unless the user asks for it again.",
            "ru": "Не повторяйте вызов, пока пользователь снова не попросит об этом.",
        },
    ),
    "idempotency_conflict": _Entry(
        "again",
        {
            "en": "This idempotency key was already used with other arguments.",
            "ru": "Этот ключ идемпотентности уже использован с другими аргументами.",
        },
        {
            "en": "If this is a different request, call again with a new idempotency key.",
            "ru": "Если это другой запрос, повторите вызов с новым ключом идемпотентности.",
        },
    ),
    "idempotency_in_progress": _Entry(
        "later",
        {
            "en": "A call with this idempotency key is still in progress.",
            "ru": "Вызов с этим ключом идемпотентности ещё выполняется.",
        },
        {
            "en": "Wait a little and repeat the same call.",
            "ru": "Подождите немного и повторите тот же вызов.",
        },
    ),
    "upstream_rate_limited": _Entry(
        "later",
        _RETURNED_STATUS,
        _RETRY_LATER,
    ),
    "upstream_timeout": _Entry(
        "later",
        {
            "en": "The external API did not answer in time.",
            "ru": "Внешний API не ответил вовремя.",
        },
        _RETRY_LATER,
    ),
    "upstream_unavailable": _Entry(
        "later",
        {"en": "The external API is unavailable.", "ru": "Внешний API недоступен."},
        _RETRY_LATER,
    ),
    "upstream_error": _Entry(
        "later",
        _RETURNED_STATUS,
        _RETRY_LATER,
    ),
    "upstream_bad_request": _Entry(
        "again",
        {
            "en": "The external API rejected the request with HTTP {status}.",
            "ru": "Внешний API отклонил запрос с HTTP {status}.",
        },
        {
            "en": "Correct the argument values and call again; the same call will fail again.",
            "ru": "Исправьте значения аргументов и повторите вызов; тот же вызов снова завершится ошибкой.",
        },
    ),
    "upstream_auth_failed": _Entry(
        "no",
        {
            "en": "The external API refused Crank's credentials with HTTP {status}.",
            "ru": "Внешний API отклонил учётные данные Crank с HTTP {status}.",
        },
        {
            "en": "Tell the user that the administrator must fix the credentials.",
            "ru": "Сообщите пользователю, что администратор должен исправить учётные данные.",
        },
    ),
    "upstream_not_found": _Entry(
        "again",
        {
            "en": "The external API found nothing (HTTP {status}).",
            "ru": "Внешний API ничего не нашёл (HTTP {status}).",
        },
        {
            "en": "Check the identifiers in the arguments; call again only with corrected ones.",
            "ru": "Проверьте идентификаторы в аргументах; повторяйте вызов только с исправленными.",
        },
    ),
    "upstream_conflict": _Entry(
        "again",
        {
            "en": "The external API reported a conflict (HTTP {status}).",
            "ru": "Внешний API сообщил о конфликте (HTTP {status}).",
        },
        {
            "en": "Read the current state of the resource before trying again.",
            "ru": "Получите текущее состояние ресурса, прежде чем пробовать снова.",
        },
    ),
    "upstream_response_invalid": _Entry(
        "no",
        {
            "en": "The external API answered with a response Crank cannot read.",
            "ru": "Внешний API вернул ответ, который Crank не может прочитать.",
        },
        {
            "en": "Tell the user that the tool is misconfigured or the API changed.",
            "ru": "Сообщите пользователю, что инструмент настроен неверно или API изменился.",
        },
    ),
    "upstream_response_too_large": _Entry(
        "again",
        {
            "en": "The response of the external API is too large.",
            "ru": "Ответ внешнего API слишком большой.",
        },
        {
            "en": "Call again with a narrower request (filters, a smaller page).",
            "ru": "Повторите вызов с более узким запросом (фильтры, страница поменьше).",
        },
    ),
    "upstream_blocked": _Entry(
        "no",
        {
            "en": "The address of the external API is not allowed.",
            "ru": "Адрес внешнего API запрещён.",
        },
        {
            "en": "Tell the user that the administrator must allow this upstream.",
            "ru": "Сообщите пользователю, что администратор должен разрешить этот адрес.",
        },
    ),
    "secret_missing": _Entry(
        "no",
        {
            "en": "A credential this tool needs is not configured.",
            "ru": "Не настроены учётные данные, нужные этому инструменту.",
        },
        {
            "en": "Tell the user that the administrator must set the secret.",
            "ru": "Сообщите пользователю, что администратор должен задать секрет.",
        },
    ),
    "approval_denied": _Entry(
        "no",
        {"en": "A human denied this call.", "ru": "Человек отклонил этот вызов."},
        {
            "en": "Do not repeat the call; ask the user how to proceed.",
            "ru": "Не повторяйте вызов; спросите пользователя, как быть дальше.",
        },
    ),
    "approval_expired": _Entry(
        "again",
        {
            "en": "Nobody approved this call in time.",
            "ru": "Никто не подтвердил этот вызов вовремя.",
        },
        {
            "en": "To ask for a new approval, call again with the same arguments.",
            "ru": "Чтобы запросить подтверждение заново, повторите вызов с теми же аргументами.",
        },
    ),
    "internal_error": _Entry(
        "later",
        {"en": "Crank failed to complete the call.", "ru": "Crank не смог выполнить вызов."},
        _RETRY_LATER,
    ),
}


def is_recoverable(code: ErrorCode) -> bool:
    return _TABLE[code].recovery != "no"


def is_transient(code: ErrorCode) -> bool:
    """The same call, unchanged, may succeed later."""
    return _TABLE[code].recovery == "later"


def suggested_action(code: ErrorCode, language: Language = "en") -> str:
    return _TABLE[code].action[language]


class ToolError(Exception):
    """A failure the model can act on; becomes ``isError: true`` with ``to_structured()``.

    Build it with ``ToolError.of(code, ...)``, which fills the message and the
    suggested action from the table in the language asked for. The error is the
    failure alone: the call's ``request_id`` is given where it is rendered
    (``to_structured``), never written into a raised error.
    """

    def __init__(
        self,
        error_code: ErrorCode,
        message: str,
        *,
        suggested_action: str,
        retry_after_s: int | None = None,
        details: Mapping[str, Any] | None = None,
        extra_fields: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        if error_code not in _TABLE:
            raise ValueError(f"unknown error code {error_code!r}")
        self.error_code: ErrorCode = error_code
        self.message = message
        self.recoverable = is_recoverable(error_code)
        self.transient = is_transient(error_code)
        self.suggested_action = suggested_action
        # Only an error whose same call may succeed later says when to retry.
        self.retry_after_s = retry_after_s if self.transient else None
        self.details: dict[str, Any] = dict(details or {})
        # Fields for the model beyond the standard ones (confirmation_required's token).
        self.extra_fields: dict[str, str] = dict(extra_fields or {})

    @classmethod
    def of(
        cls,
        error_code: ErrorCode,
        *,
        language: Language = "en",
        retry_after_s: int | None = None,
        details: Mapping[str, Any] | None = None,
        extra_fields: Mapping[str, str] | None = None,
        **params: Any,
    ) -> Self:
        entry = _TABLE[error_code]
        return cls(
            error_code,
            entry.message[language].format(**params),
            suggested_action=entry.action[language],
            retry_after_s=retry_after_s,
            details=details,
            extra_fields=extra_fields,
        )

    def to_structured(self, request_id: str = "") -> dict[str, Any]:
        """The model's view: ``request_id`` is the call's (req_..., for the call log)."""
        value: dict[str, Any] = {
            "error_code": self.error_code,
            "message": self.message,
            "recoverable": self.recoverable,
            "suggested_action": self.suggested_action,
            "request_id": request_id,
        }
        if self.retry_after_s is not None:
            value["retry_after_s"] = self.retry_after_s
        value.update(self.extra_fields)
        return value

    def __repr__(self) -> str:
        return f"ToolError({self.error_code!r}, {self.message!r})"


def invalid_arguments(
    problems: Sequence[tuple[str, str, str]], *, language: Language = "en"
) -> ToolError:
    """``problems``: (field as a JSON path, failed rule, short explanation)."""
    text = "; ".join(f"{field}: {explanation}" for field, _, explanation in problems)
    return ToolError.of(
        "invalid_arguments",
        language=language,
        problems=text,
        details={"errors": [{"field": f, "rule": r} for f, r, _ in problems]},
    )


def confirmation_required(token: str, *, language: Language = "en") -> ToolError:
    """Not a failure: a call that needs confirmation gets the ``ct_`` token to send back,
    in the message (the seed's) and as ``confirmation_token`` (for a program to read)."""
    return ToolError.of(
        "confirmation_required",
        language=language,
        token=token,
        extra_fields={"confirmation_token": token},
    )


_APPROVER_NOTE: Mapping[Language, str] = {
    "en": ' The approver\'s note: "{note}"',
    "ru": " Комментарий согласующего: «{note}»",
}


def approval_denied(note: str | None, *, language: Language = "en") -> ToolError:
    """A human denied the call; the approver's note, if any, follows the message."""
    message = _TABLE["approval_denied"].message[language]
    if note:
        message += _APPROVER_NOTE[language].format(note=note)
    return ToolError(
        "approval_denied", message, suggested_action=suggested_action("approval_denied", language)
    )


def secret_missing(name: str, *, language: Language = "en") -> ToolError:
    """The secret's name goes to details (for the admin's logs), not to the model."""
    return ToolError.of("secret_missing", language=language, details={"secret": name})
