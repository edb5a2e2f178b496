"""Who may use an endpoint: the one authentication sequence of the gateway.

Origin (403) → bearer key (401 with ``WWW-Authenticate: Bearer``; 503 with
``Retry-After`` when the key cannot be checked now, mcp_gateway.catalog.keys) →
workspace and agent published (404) → a key of this agent and of the
endpoint's kind (403). The MCP endpoint asks for an agent key, the
approval-key endpoints for an approval key; both run ``authenticate`` and
answer the same status for the same situation (docs/architecture.md,
"Status precedence").
"""

from __future__ import annotations

from typing import Literal, NamedTuple
from urllib.parse import urlsplit

import structlog

from mcp_gateway.catalog.keys import KeyLookupUnavailable
from mcp_gateway.catalog.snapshot import Agent, Key
from mcp_gateway.transport.asgi import Headers, Scope, client_address
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.state import GatewayState
from mcp_gateway.vocabulary.requesters import Requester
from shared.identity.refusals import RefusalReason, TokenRefused
from shared.keys import KEY_PREFIX
from shared.settings import Settings

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}
# The IdP could not be asked: the token may be good (503, like a key look-up).
_UNAVAILABLE: frozenset[RefusalReason] = frozenset(
    {"keys_unavailable", "introspection_unavailable"}
)
_RETRY_AFTER_S = 5
log = structlog.get_logger(__name__)

KeyKind = Literal["agent", "approval"]


class _Wording(NamedTuple):
    """How a refusal names the keys of one kind of endpoint."""

    placeholder: str  # in the 401 hint
    wrong_kind: str
    other_agent: str
    instead: str


_WORDING: dict[KeyKind, _Wording] = {
    "agent": _Wording(
        "agent_api_key", "an approval key", "a key of another agent", "the agent's own API key"
    ),
    "approval": _Wording(
        "approval_api_key",
        "an agent key",
        "an approval key of another agent",
        "this agent's approval key",
    ),
}


def origin_host(origin: str) -> str | None:
    """The host of an Origin header; None when it has none or cannot be read
    (``http://[::1`` makes urlsplit raise: an unreadable Origin is refused, never a 500)."""
    try:
        return urlsplit(origin).hostname
    except ValueError:
        return None


def origin_allowed(origin: str, allowed: tuple[str, ...], *, loopback_ok: bool) -> bool:
    """Browsers send Origin; a page on another site must not reach the gateway
    (DNS rebinding). ``CRANK_ALLOWED_ORIGINS`` are allowed; loopback pages too,
    but only while the gateway itself listens on loopback (a local run)."""
    if origin.rstrip("/") in allowed:
        return True
    host = origin_host(origin)
    return loopback_ok and host is not None and host in LOOPBACK_HOSTS


def public_origin(public_url: str) -> str | None:
    """The origin of ``CRANK_PUBLIC_URL`` (scheme and host), None when it is not set."""
    return public_url.rstrip("/") or None


def checked_origin(settings: Settings, headers: Headers) -> str | None:
    """The request's Origin when it is allowed, None when there is none; else 403.

    The gateway's own public origin is allowed besides ``CRANK_ALLOWED_ORIGINS``:
    the approver inbox is served from it and its same-origin POSTs carry it
    (docs/architecture.md, "The approver inbox"). The approval endpoints echo the
    returned Origin in their CORS headers."""
    origin = headers.get("origin")
    allowed = settings.allowed_origins
    if own := public_origin(settings.public_url):
        allowed = (*allowed, own)
    if origin is not None and not origin_allowed(
        origin, allowed, loopback_ok=settings.host in LOOPBACK_HOSTS
    ):
        raise ProtocolError(403, "Origin not allowed")
    return origin


def bearer(headers: Headers) -> str | None:
    """The token of ``Authorization: Bearer <token>``, if any."""
    value = headers.get("authorization")
    if not value:
        return None
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


async def authenticate(
    state: GatewayState, scope: Scope, headers: Headers, workspace: str, slug: str, kind: KeyKind
) -> tuple[Agent, Key]:
    """The published agent and the key of kind ``kind`` that may use it; raises
    ProtocolError in the order of the module docstring. Marks the key used."""
    checked_origin(state.settings, headers)
    return await _key_caller(state, scope, bearer(headers), workspace, slug, kind)


async def authenticate_requester(
    state: GatewayState, scope: Scope, headers: Headers, workspace: str, slug: str
) -> tuple[Agent, Requester]:
    """The published agent and who calls it at the MCP endpoint: an agent key, or a
    token of one of the agent's identity providers (docs/architecture.md,
    "Identity"). A key starts with ``crk_``; anything else is taken as a token."""
    checked_origin(state.settings, headers)
    token = bearer(headers)
    if token is None or token.startswith(KEY_PREFIX):
        agent, key = await _key_caller(state, scope, token, workspace, slug, "agent")
        if not agent.access.keys:
            raise ProtocolError(
                401,
                "this agent takes no agent keys: sign in with one of its identity providers",
                headers={
                    "WWW-Authenticate": agent.access.challenge_for(
                        "invalid_token", "agent keys are not accepted"
                    )
                },
            )
        return agent, Requester.of_key(key.id)
    return await _token_caller(state, token, workspace, slug)


async def _key_caller(
    state: GatewayState, scope: Scope, token: str | None, workspace: str, slug: str, kind: KeyKind
) -> tuple[Agent, Key]:
    snapshot = state.catalog.snapshot
    try:
        key = await state.keys.resolve(token, snapshot, client_address(scope)) if token else None
    except KeyLookupUnavailable as busy:  # 503, not 401: the key may be valid (catalog.keys)
        raise ProtocolError(
            503,
            "cannot check this API key now; retry",
            headers={"Retry-After": str(busy.retry_after_s)},
        ) from None
    if key is None:
        raise _unauthenticated(snapshot.agents.get((workspace, slug)), kind)
    agent = snapshot.agents.get((workspace, slug))
    if agent is None or not agent.published:
        raise ProtocolError(404, f"agent {workspace}/{slug} is not published")
    if key.agent_id != agent.id or key.kind != kind:
        wording = _WORDING[kind]
        reason = wording.wrong_kind if key.kind != kind else wording.other_agent
        raise ProtocolError(403, f"this is {reason}; use {wording.instead}")
    state.key_use.mark(key.id)  # written in batches off the hot path
    return agent, key


def _unauthenticated(agent: Agent | None, kind: KeyKind) -> ProtocolError:
    """401 for no key or an unknown one; at an agent that takes tokens, the
    challenge names its Protected Resource Metadata, so a client can sign in."""
    placeholder = _WORDING[kind].placeholder
    if kind == "agent" and agent is not None and agent.published and agent.access.metadata:
        keys = f" or 'Authorization: Bearer <{placeholder}>'" if agent.access.keys else ""
        return ProtocolError(
            401,
            "sign in: send 'Authorization: Bearer <access token>' from one of the agent's "
            f"identity providers (see WWW-Authenticate){keys}",
            headers={"WWW-Authenticate": agent.access.challenge},
        )
    return ProtocolError(
        401,
        f"missing or invalid API key: send 'Authorization: Bearer <{placeholder}>'",
        headers={"WWW-Authenticate": "Bearer"},
    )


async def _token_caller(
    state: GatewayState, token: str, workspace: str, slug: str
) -> tuple[Agent, Requester]:
    """A token at an agent that takes none is refused like an unknown key (401,
    before whether the agent exists, as for keys)."""
    agent = state.catalog.snapshot.agents.get((workspace, slug))
    access = agent.access if agent is not None and agent.published else None
    if agent is None or access is None or access.providers is None:
        raise _unauthenticated(agent, "agent")
    try:
        providers = access.providers
        person = providers.remembered(token, access.resource) or await providers.authenticate(
            token, access.resource
        )
    except TokenRefused as refused:
        if refused.reason in _UNAVAILABLE:  # the IdP, not the token: retry
            raise ProtocolError(
                503,
                "cannot check this access token now (its identity provider is unreachable, "
                "or busy); retry",
                data={"reason": refused.reason},
                headers={"Retry-After": str(_RETRY_AFTER_S)},
            ) from None
        log.info("token_refused", reason=refused.reason, detail=refused.detail[:100])
        raise ProtocolError(
            401,
            f"access token refused: {refused.reason}",
            data={"reason": refused.reason},
            headers={"WWW-Authenticate": access.challenge_for("invalid_token", refused.reason)},
        ) from None
    if not access.scopes <= person.scopes:
        raise insufficient_scope(agent, access.scopes)
    return agent, Requester.of_person(agent.id, person)


def insufficient_scope(agent: Agent, needed: frozenset[str]) -> ProtocolError:
    """403 for a valid token without ``needed`` (the agent's and, for a tool, its
    own): the client may ask its IdP for them and try again (step-up)."""
    scope = " ".join(sorted(needed | agent.access.scopes))
    return ProtocolError(
        403,
        f"this needs the scopes: {scope}",
        data={"scope": scope},
        headers={
            "WWW-Authenticate": agent.access.challenge_for(
                "insufficient_scope", f"needs {scope}", scope
            )
        },
    )
