"""The operation file format: the contract for ``crank apply``, the API and the UI.

Unknown fields are refused everywhere (``forbid_unknown_fields``) so a typo in
an operation file is an error, not a silently ignored setting. The default
values here are the documented defaults of the format.
"""

from __future__ import annotations

from typing import Any, Final, Literal

import msgspec

from shared.identity.issuers import DEFAULT_ALGORITHMS

HttpMethod = Literal["GET", "POST", "PUT", "PATCH", "DELETE"]


class _Spec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=False):
    pass


class SecretRef(_Spec, kw_only=True):
    """``{secret: NAME}``: a workspace secret where a value is expected (a basic-auth field)."""

    secret: str


class AuthSpec(_Spec, kw_only=True):
    """How workspace secrets are sent upstream (docs/operation-file.md, "Auth").

    ``bearer``: ``Authorization: Bearer <secret>``; ``header``: the secret in the
    header ``name``; ``query``: the secret in the query parameter ``name``;
    ``basic``: either ``secret`` holding ``user:password``, or ``username`` (a
    literal or a ``SecretRef``) with an optional ``password`` (a ``SecretRef``;
    a literal is refused by validation, which says where the password belongs).
    """

    type: Literal["bearer", "header", "query", "basic"]
    secret: str | None = None
    name: str | None = None  # header name (type=header) or query parameter (type=query)
    username: str | SecretRef | None = None  # type=basic
    password: str | SecretRef | None = None  # type=basic with username

    def secret_references(self) -> tuple[tuple[str, str], ...]:
        """(field under ``request.auth``, secret name) of every secret this auth reads."""
        named = [("secret", self.secret)]
        named += [
            (f"{part}.secret", value.secret)
            for part, value in (("username", self.username), ("password", self.password))
            if isinstance(value, SecretRef)
        ]
        return tuple((field, name) for field, name in named if name is not None)

    def secret_names(self) -> tuple[str, ...]:
        """Every workspace secret this auth reads, in order, without repeats."""
        return tuple(dict.fromkeys(name for _, name in self.secret_references()))


class RequestSpec(_Spec, kw_only=True):
    """The upstream request: ``{var}`` expansions in the URL path; query and body by JMESPath."""

    method: HttpMethod
    url: str
    query: dict[str, str] | None = None  # parameter -> JMESPath over the arguments
    headers: dict[str, str] | None = None  # static
    body: str | None = None  # JMESPath over the arguments
    auth: AuthSpec | list[AuthSpec] | None = None  # a list: several credentials at once

    def auth_entries(self) -> tuple[tuple[str, AuthSpec], ...]:
        """(field path, binding) of each credential: ``request.auth`` for one object,
        ``request.auth[i]`` for a list."""
        if self.auth is None:
            return ()
        if isinstance(self.auth, AuthSpec):
            return (("request.auth", self.auth),)
        return tuple((f"request.auth[{index}]", auth) for index, auth in enumerate(self.auth))

    def secret_names(self) -> tuple[str, ...]:
        """Every workspace secret the request's auth reads, in order, without repeats."""
        names = (name for _, auth in self.auth_entries() for name in auth.secret_names())
        return tuple(dict.fromkeys(names))


class ResponseSpec(_Spec, kw_only=True):
    """What the model gets of the upstream JSON: a JMESPath selection, capped in size."""

    select: str | None = None  # JMESPath over the upstream JSON
    max_items: int = 50
    max_bytes: int = 65536
    max_raw_bytes: int | None = None  # None: derived from max_bytes (shared.engine.answer_limits)
    output_schema: dict[str, Any] | None = None


class IdempotencySpec(_Spec, kw_only=True):
    """The argument whose value goes upstream in ``header`` and keys the idempotency memory."""

    argument: str
    header: str = "Idempotency-Key"


class ExecutionConfig(_Spec, kw_only=True):
    """``timeout_ms`` per attempt; ``retries`` extra attempts, only where repeating is safe."""

    timeout_ms: int = 10000
    retries: int = 2
    idempotency: IdempotencySpec | None = None


class SafetySpec(_Spec, kw_only=True):
    approval: bool = False
    # "auto": required for DELETE, off otherwise. DELETE cannot turn it off.
    confirmation: bool | Literal["auto"] = "auto"


class OperationSpec(_Spec, kw_only=True):
    """One operation as its author writes it: the tool the model sees and the call behind it."""

    name: str
    title: str | None = None
    description: str
    input: dict[str, Any]
    request: RequestSpec
    response: ResponseSpec = msgspec.field(default_factory=ResponseSpec)
    execution_config: ExecutionConfig = msgspec.field(default_factory=ExecutionConfig)
    safety: SafetySpec = msgspec.field(default_factory=SafetySpec)
    # OAuth scopes a caller's token must hold for this tool, beyond its agent's
    # (docs/operation-file.md, "Identity"): tools/list hides the tool from a token
    # without them, tools/call refuses it 403 insufficient_scope.
    scopes: list[str] = msgspec.field(default_factory=list)

    def confirmation_required(self) -> bool:
        if self.safety.confirmation == "auto":
            return self.request.method == "DELETE"
        return bool(self.safety.confirmation)


class RateLimit(_Spec, kw_only=True):
    """An agent's tools/call limit per key: ``requests`` per ``per_seconds``."""

    requests: int
    per_seconds: int


ConfirmationMode = Literal["auto", "token"]


class AgentAuth(_Spec, kw_only=True):
    """Who may call an agent (docs/operation-file.md, "Identity"): tokens of the named
    identity providers holding ``scopes``, and agent keys unless ``agent_keys`` is false.
    A caller presents a key or a token, never both."""

    providers: list[str] = msgspec.field(default_factory=list)
    agent_keys: bool = True
    scopes: list[str] = msgspec.field(default_factory=list)


class AgentSpec(_Spec, kw_only=True):
    """An agent in an operation file: its slug and the names of the operations it exposes."""

    slug: str
    title: str = ""
    description: str = ""
    operations: list[str] = msgspec.field(default_factory=list)
    rate_limit: RateLimit | None = None
    # Who confirms a DELETE: "auto" asks the human through a client that declares
    # elicitation (2026-07-28) and hands other clients a ct_ token; "token" hands
    # every client the token (docs/architecture.md, "DELETE confirmation").
    confirmation_mode: ConfirmationMode = "auto"
    # Seconds a tools/call may wait on its open answer for an approval's decision, at
    # most CRANK_APPROVAL_WAIT_S; 0 never waits; None takes the setting
    # (docs/architecture.md, "Waiting for a decision").
    approval_wait_s: int | None = None
    auth: AgentAuth = msgspec.field(default_factory=AgentAuth)


WEBHOOK_EVENTS: Final = (
    "approval.created",
    "approval.decided",
    "approval.completed",
    "approval.failed",
    "approval.expired",
)
WEBHOOK_FORMATS: Final = ("standard", "slack")


class WebhookSpec(_Spec, kw_only=True):
    """A webhook subscription as the admin API and the operation file take it; its
    signing secret is made by Crank, never given (docs/architecture.md, "Webhooks")."""

    url: str
    events: list[str] = msgspec.field(default_factory=lambda: list(WEBHOOK_EVENTS))
    format: str = "standard"


class FileAgentSpec(AgentSpec, kw_only=True):
    """An agent as the operation file holds it: the agent's draft and, when given, the
    webhook subscriptions ``crank apply`` keeps it to. ``webhooks`` is not part of the
    agent's draft (subscriptions are resources of their own): ``agent()`` is."""

    webhooks: list[WebhookSpec] | None = None  # None: apply leaves subscriptions alone

    def agent(self) -> AgentSpec:
        return AgentSpec(**{name: getattr(self, name) for name in AgentSpec.__struct_fields__})


class IntrospectionSpec(_Spec, kw_only=True):
    """RFC 7662 credentials for opaque tokens; the endpoint comes from the issuer's metadata."""

    client_id: str
    client_secret: str  # the NAME of a workspace secret, never the value


class IdentityProviderSpec(_Spec, kw_only=True):
    """A trusted identity provider of a workspace (docs/operation-file.md, "Identity");
    the checks are ``shared.identity.issuers.TrustedIssuer``'s."""

    name: str
    issuer: str  # stored and compared byte for byte
    algorithms: list[str] = msgspec.field(default_factory=lambda: list(DEFAULT_ALGORITHMS))
    token_types: list[str] = msgspec.field(default_factory=lambda: ["at+jwt"])
    subject_claim: str = "sub"
    groups_claim: str | None = None
    leeway_s: int = 30
    introspection: IntrospectionSpec | None = None


class CrankFile(_Spec, kw_only=True):
    """The whole operation file ``crank apply`` reads: operations and agents of one workspace."""

    workspace: str | None = None  # None: the workspace named by the API path or --workspace
    identity_providers: list[IdentityProviderSpec] = msgspec.field(default_factory=list)
    operations: list[OperationSpec] = msgspec.field(default_factory=list)
    agents: list[FileAgentSpec] = msgspec.field(default_factory=list)


def spec_to_builtins(spec: msgspec.Struct) -> dict[str, Any]:
    """The stored (jsonb) form: every field present, so equal specs compare equal.

    Except identity's fields at their defaults (an operation's ``scopes``, an
    agent's ``auth``): left out, so what was stored before they existed still
    compares equal and no apply or publish sees a change that is none."""
    value = msgspec.to_builtins(spec)
    assert isinstance(value, dict)
    if isinstance(spec, OperationSpec) and not spec.scopes:
        del value["scopes"]
    if isinstance(spec, AgentSpec) and spec.auth == AgentAuth():
        del value["auth"]
    return value


def operation_from_builtins(value: Any) -> OperationSpec:
    """Decode stored JSON into an ``OperationSpec``; raises ``msgspec.ValidationError``."""
    return msgspec.convert(value, OperationSpec)


def agent_from_builtins(value: Any) -> AgentSpec:
    """Decode stored JSON into an ``AgentSpec``; raises ``msgspec.ValidationError``."""
    return msgspec.convert(value, AgentSpec)
