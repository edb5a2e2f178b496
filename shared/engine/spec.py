"""The operation file format: the contract for ``crank apply``, the API and the UI.

Unknown fields are refused everywhere (``forbid_unknown_fields``) so a typo in
an operation file is an error, not a silently ignored setting. The default
values here are the documented defaults of the format.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]


class _Spec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=False):
    pass


class AuthSpec(_Spec, kw_only=True):
    type: Literal["bearer", "header", "basic"]
    secret: str
    name: str | None = None  # header name, for type=header


class RequestSpec(_Spec, kw_only=True):
    method: HttpMethod
    url: str
    query: dict[str, str] | None = None  # parameter -> JMESPath over the arguments
    headers: dict[str, str] | None = None  # static
    body: str | None = None  # JMESPath over the arguments
    auth: AuthSpec | None = None


class ResponseSpec(_Spec, kw_only=True):
    select: str | None = None  # JMESPath over the upstream JSON
    max_items: int = 50
    max_bytes: int = 65536
    output_schema: dict[str, Any] | None = None


class IdempotencySpec(_Spec, kw_only=True):
    argument: str
    header: str = "Idempotency-Key"


class ExecutionConfig(_Spec, kw_only=True):
    timeout_ms: int = 10000
    retries: int = 2
    idempotency: IdempotencySpec | None = None


class SafetySpec(_Spec, kw_only=True):
    approval: bool = False
    # "auto": required for DELETE, off otherwise. DELETE cannot turn it off.
    confirmation: bool | Literal["auto"] = "auto"


class OperationSpec(_Spec, kw_only=True):
    name: str
    title: str | None = None
    description: str
    input: dict[str, Any]
    request: RequestSpec
    response: ResponseSpec = msgspec.field(default_factory=ResponseSpec)
    execution_config: ExecutionConfig = msgspec.field(default_factory=ExecutionConfig)
    safety: SafetySpec = msgspec.field(default_factory=SafetySpec)

    def confirmation_required(self) -> bool:
        if self.safety.confirmation == "auto":
            return self.request.method == "DELETE"
        return bool(self.safety.confirmation)


class RateLimit(_Spec, kw_only=True):
    requests: int
    per_seconds: int


class AgentSpec(_Spec, kw_only=True):
    slug: str
    title: str = ""
    description: str = ""
    operations: list[str] = msgspec.field(default_factory=list)
    rate_limit: RateLimit | None = None


class CrankFile(_Spec, kw_only=True):
    workspace: str | None = None  # None: the workspace named by the API path or --workspace
    operations: list[OperationSpec] = msgspec.field(default_factory=list)
    agents: list[AgentSpec] = msgspec.field(default_factory=list)


def spec_to_builtins(spec: msgspec.Struct) -> dict[str, Any]:
    """The stored (jsonb) form: every field present, so equal specs compare equal."""
    value = msgspec.to_builtins(spec)
    assert isinstance(value, dict)
    return value


def operation_from_builtins(value: Any) -> OperationSpec:
    return msgspec.convert(value, OperationSpec)


def agent_from_builtins(value: Any) -> AgentSpec:
    return msgspec.convert(value, AgentSpec)
