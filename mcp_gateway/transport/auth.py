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

from mcp_gateway.catalog.keys import KeyLookupUnavailable
from mcp_gateway.catalog.snapshot import Agent, Key
from mcp_gateway.transport.asgi import Headers, Scope, client_address
from mcp_gateway.transport.errors import ProtocolError
from mcp_gateway.transport.state import GatewayState
from shared.settings import Settings

LOOPBACK_HOSTS = {"localhost", "127.0.0.1", "::1"}

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
    token = bearer(headers)
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
        raise ProtocolError(
            401,
            "missing or invalid API key: send "
            f"'Authorization: Bearer <{_WORDING[kind].placeholder}>'",
            headers={"WWW-Authenticate": "Bearer"},
        )
    agent = snapshot.agents.get((workspace, slug))
    if agent is None or not agent.published:
        raise ProtocolError(404, f"agent {workspace}/{slug} is not published")
    if key.agent_id != agent.id or key.kind != kind:
        wording = _WORDING[kind]
        reason = wording.wrong_kind if key.kind != kind else wording.other_agent
        raise ProtocolError(403, f"this is {reason}; use {wording.instead}")
    state.key_use.mark(key.id)  # written in batches off the hot path
    return agent, key
