"""The operation compiler: one published ``OperationSpec`` → a ``CompiledOperation``.

One code path for the gateway's tools/call, its approval worker and the
control plane's try-it::

    arguments ──validate──▶ cleaned arguments ──build(secrets)──▶ BuiltRequest
                                            (shared.engine.request_builder)
    BuiltRequest ──call──▶ Selected | ToolError
        send (shared.engine.outbound: SSRF guard, timeout, safe retries), then
        select from the answer (shared.engine.response_selector); every failure is a
        ToolError (shared.engine.upstream), every text masked (shared.engine.masking);
        the answer's size bounded (shared.engine.answer_limits)

Everything that can be compiled is compiled once, in ``compile_operation``:
the input schema's validator (JSON Schema 2020-12 with format checking and a
``referencing`` registry that cannot retrieve anything, so a ``$ref`` never
leaves the document), the JMESPath mappings, the URL template and the
response selection.

Argument validation: first the size of the arguments
(``shared.engine.argument_limits``), then the input schema (a flat schema first
through the quick accept of ``shared.engine.schema_fast_path``; jsonschema, with
the linear-time keywords of ``shared.engine.schema_keywords``, judges and words
everything it does not accept), plus ``_crank_confirmation_token``
(a ``ct_...`` string) when the operation requires confirmation. Up to
``MAX_REPORTED_ERRORS`` failures (of the first ``_ERRORS_LOOKED_AT`` jsonschema
finds) are reported in one ``invalid_arguments`` error, each as ``$.json.path: explanation`` so the model can correct itself.
``validate`` returns the arguments without the token, whole numbers as
integers (``shared.engine.canonical.normal_numbers``); read the token with
``confirmation_token`` before.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from jsonschema.exceptions import ValidationError
from referencing import Registry
from referencing.exceptions import Unresolvable

from shared import tracing
from shared.engine.answer_limits import OFF_LOOP_BYTES, raw_body_limit
from shared.engine.argument_limits import child_path, oversized
from shared.engine.canonical import normal_numbers
from shared.engine.egress import EgressPolicy
from shared.engine.errors import Language, ToolError, invalid_arguments
from shared.engine.masking import NO_SECRETS, Masker
from shared.engine.outbound import OutboundError, UpstreamExecutor, UpstreamRequest
from shared.engine.request_builder import (
    CONFIRMATION_ARGUMENT,
    CONFIRMATION_TOKEN_PATTERN,
    BuiltRequest,
    RequestBuilder,
)
from shared.engine.response_selector import Headers, ResponseSelector, Selected
from shared.engine.schema_fast_path import compile_fast_check
from shared.engine.schema_keywords import (
    ARGUMENT_FORMAT_CHECKER,
    ArgumentSchemaValidator,
    additional_names,
    prepare_argument_schema,
)
from shared.engine.spec import OperationSpec
from shared.engine.upstream import UpstreamCall, upstream_failure

MAX_REPORTED_ERRORS = 5
_ERRORS_LOOKED_AT = 10 * MAX_REPORTED_ERRORS  # of which the first MAX_REPORTED_ERRORS, sorted
_MAX_EXPLANATION = 160
_CONFIRMATION_PROPERTY = {"type": "string", "pattern": CONFIRMATION_TOKEN_PATTERN}


def _explanation(error: ValidationError) -> str:
    """jsonschema's message, with the offending value left out when it is long."""
    text = error.message
    if len(text) > _MAX_EXPLANATION:
        text = text[: _MAX_EXPLANATION - 1] + "…"
    return text


def _sort_key(error: ValidationError) -> tuple[str, str]:
    return (error.json_path, str(error.validator))


def _problems(error: ValidationError) -> list[tuple[str, str, str]]:
    """(field, rule, explanation); a missing or unexpected property is named as the field."""
    rule = str(error.validator)
    instance = error.instance
    if rule == "required" and isinstance(instance, dict):
        names = error.validator_value if isinstance(error.validator_value, list) else []
        missing = [p for p in names if isinstance(p, str) and p not in instance]
        return [(child_path(error.json_path, p), rule, "is required") for p in missing]
    if rule == "additionalProperties" and isinstance(instance, dict):
        extras = additional_names(instance, error.schema)
        if extras:
            return [
                (child_path(error.json_path, k), rule, "is not an allowed argument") for k in extras
            ]
    return [(error.json_path, rule, _explanation(error))]


def confirmation_token(arguments: Mapping[str, Any] | None) -> str | None:
    """The ``_crank_confirmation_token`` argument when it is a string, else None."""
    value = (arguments or {}).get(CONFIRMATION_ARGUMENT)
    return value if isinstance(value, str) else None


class ArgumentValidator:
    def __init__(
        self, schema: Mapping[str, Any], *, confirmation: bool, language: Language = "en"
    ) -> None:
        schema = dict(schema)
        if confirmation:
            properties = dict(schema.get("properties") or {})
            properties[CONFIRMATION_ARGUMENT] = _CONFIRMATION_PROPERTY
            schema["properties"] = properties
        schema = prepare_argument_schema(schema)  # every regex compiled once, with RE2
        self._validator = ArgumentSchemaValidator(
            schema,
            registry=Registry(),  # no retrieve function: nothing is ever fetched
            format_checker=ARGUMENT_FORMAT_CHECKER,
        )
        self._language: Language = language
        self._fast_check = compile_fast_check(schema)

    def validate(self, arguments: Any) -> dict[str, Any]:
        """The arguments without the confirmation token, or ``invalid_arguments``."""
        if arguments is None:
            arguments = {}
        if not isinstance(arguments, dict):
            raise invalid_arguments(
                [("$", "type", "arguments must be a JSON object")], language=self._language
            )
        too_large = oversized(arguments)
        if too_large is not None:
            raise invalid_arguments([too_large], language=self._language)
        # One number form from here on (docs/architecture.md, "Argument numbers").
        arguments = normal_numbers(arguments)
        if self._fast_check is not None and self._fast_check(arguments):
            return {k: v for k, v in arguments.items() if k != CONFIRMATION_ARGUMENT}
        try:
            # A bounded look: ten thousand failing items would each build an error.
            errors = sorted(
                itertools.islice(self._validator.iter_errors(arguments), _ERRORS_LOOKED_AT),
                key=_sort_key,
            )
        except Unresolvable as exc:  # write-time checks refuse such refs; never fetched
            raise ToolError.of(
                "internal_error", language=self._language, details={"schema": str(exc)}
            ) from None
        if errors:
            problems: list[tuple[str, str, str]] = []
            for error in errors:
                for problem in _problems(error):
                    if problem not in problems:
                        problems.append(problem)
            raise invalid_arguments(problems[:MAX_REPORTED_ERRORS], language=self._language)
        return {k: v for k, v in arguments.items() if k != CONFIRMATION_ARGUMENT}


class CompiledOperation:
    """The compiled parts of one published operation version."""

    def __init__(self, spec: OperationSpec, *, language: Language = "en") -> None:
        self.spec = spec
        self._language: Language = language
        self.confirmation_required = spec.confirmation_required()
        self._arguments = ArgumentValidator(
            spec.input, confirmation=self.confirmation_required, language=language
        )
        self._builder = RequestBuilder(spec, language=language)
        self._raw_limit = raw_body_limit(spec.response)
        # The URL's path as the spec writes it ({var} unexpanded): no argument values.
        self._path_template = urlsplit(spec.request.url).path or "/"
        self._selector = ResponseSelector(
            select=spec.response.select,
            max_items=spec.response.max_items,
            max_bytes=spec.response.max_bytes,
            language=language,
        )

    def validate(self, arguments: Any) -> dict[str, Any]:
        return self._arguments.validate(arguments)

    def build(
        self, arguments: Mapping[str, Any], secrets: Mapping[str, str] | None = None
    ) -> BuiltRequest:
        """``arguments`` as ``validate`` returned them."""
        return self._builder.build(arguments, secrets)

    def upstream_request(
        self, built: BuiltRequest, egress: EgressPolicy | None = None
    ) -> UpstreamRequest:
        """``built`` with the operation's timeout, retries and idempotency header,
        sent under the workspace's ``egress`` policy."""
        execution = self.spec.execution_config
        idempotency = execution.idempotency
        return UpstreamRequest(
            method=built.method,
            url=built.url,
            headers=built.headers,
            body=built.body,
            timeout_ms=execution.timeout_ms,
            retries=execution.retries,
            idempotency_header=idempotency.header if idempotency else None,
            max_response_bytes=self._raw_limit,
            egress=egress,
        )

    def select(
        self, status: int, headers: Headers, body: bytes, *, masker: Masker = NO_SECRETS
    ) -> Selected:
        """Raises ``ToolError`` for a non-success status or an unusable body."""
        return self._selector.select(status, headers, body, masker=masker)

    async def call(
        self,
        executor: UpstreamExecutor,
        built: BuiltRequest,
        upstream: UpstreamCall | None = None,
        *,
        egress: EgressPolicy | None,
    ) -> Selected:
        """The upstream step: send ``built`` under the workspace's ``egress`` policy
        (None only where no workspace is involved), select from the answer. Raises
        only ``ToolError`` (details: upstream_status, attempts, the masked upstream
        text or reason); ``upstream`` records the measurements either way."""
        upstream = UpstreamCall() if upstream is None else upstream
        request = self.upstream_request(built, egress)
        if tracing.enabled:  # a client span, its context sent upstream (docs/tracing.md)
            with tracing.upstream_span(request, self._path_template) as traced:
                error_code = None
                try:
                    return await self._send(executor, traced.request, built.masker, upstream)
                except ToolError as exc:
                    error_code = exc.error_code
                    raise
                finally:
                    traced.ended(upstream.status, upstream.attempts, error_code)
        return await self._send(executor, request, built.masker, upstream)

    async def _send(
        self,
        executor: UpstreamExecutor,
        request: UpstreamRequest,
        masker: Masker,
        upstream: UpstreamCall,
    ) -> Selected:
        started = time.perf_counter()
        try:
            response = await executor.execute(request)
        except OutboundError as exc:
            upstream.attempts = exc.attempts
            upstream.elapsed_ms = (time.perf_counter() - started) * 1000
            raise upstream_failure(exc, language=self._language, masker=masker) from exc
        upstream.response = response
        upstream.attempts = response.attempts
        upstream.elapsed_ms = response.elapsed_ms
        select = functools.partial(
            self._selector.select,
            response.status,
            response.headers,
            response.body,
            masker=masker,
            max_nodes=executor.config.max_json_nodes,
        )
        try:
            if len(response.body) <= OFF_LOOP_BYTES:
                return select()
            # Decoding, selecting and masking a large answer is CPU work: in a
            # worker thread the loop keeps serving (docs/architecture.md, "Upstream answers").
            return await asyncio.to_thread(select)
        except ToolError as exc:
            exc.details["attempts"] = response.attempts
            raise


def compile_operation(spec: OperationSpec, *, language: Language = "en") -> CompiledOperation:
    """Compile a spec that passed ``shared.engine.spec_validation.validate_operation``."""
    return CompiledOperation(spec, language=language)


__all__ = [
    "CONFIRMATION_ARGUMENT",
    "ArgumentValidator",
    "CompiledOperation",
    "ToolError",
    "child_path",
    "compile_operation",
    "confirmation_token",
]
