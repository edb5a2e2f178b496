"""Who may call an agent besides its keys, prepared with the snapshot
(docs/architecture.md, "Identity"): the providers it trusts (a ``ProviderSet``),
the scopes every token must hold, its canonical resource URL (the audience of
its tokens, RFC 8707), its Protected Resource Metadata (RFC 9728) already
encoded, and the challenge of a 401."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec
import structlog

from shared.identity.provider_sets import IdentityParts, ProviderSet, ProviderSettings
from shared.public_urls import mcp_endpoint_path

log = structlog.get_logger(__name__)
WELL_KNOWN = "/.well-known/oauth-protected-resource"


@dataclass(frozen=True, slots=True)
class AgentAccess:
    """``providers`` None: keys only, as an agent without ``auth.providers`` is."""

    keys: bool = True  # agent keys are accepted
    scopes: frozenset[str] = frozenset()  # every token must hold these
    providers: ProviderSet | None = None
    resource: str = ""  # the canonical endpoint URL; "" without providers
    metadata_url: str = ""  # where its Protected Resource Metadata is served
    metadata: bytes = b""  # that document, encoded
    challenge: str = "Bearer"  # WWW-Authenticate of a 401 without a token
    made_of: AccessInputs | None = None  # equal inputs next build: this very access

    def challenge_for(self, error: str, description: str = "", scope: str | None = None) -> str:
        """The WWW-Authenticate of a refused token (``invalid_token``) or of a
        missing scope (``insufficient_scope``, ``scope`` the scopes needed)."""
        parts = [f'error="{error}"']
        if description:
            parts.append(f'error_description="{_quoted(description)}"')
        parts.append(f'resource_metadata="{self.metadata_url}"')
        scopes = " ".join(sorted(self.scopes)) if scope is None else scope
        if scopes:
            parts.append(f'scope="{scopes}"')
        return "Bearer " + ", ".join(parts)


KEYS_ONLY = AgentAccess()
_KEYS_REFUSED = AgentAccess(keys=False)  # accepts no one: providers named but not usable


@dataclass(frozen=True, slots=True)
class AccessInputs:
    """What an agent's access is made of: equal inputs make the same access, so a
    rebuilt agent keeps its ``ProviderSet`` and the tokens it remembers."""

    keys: bool
    scopes: frozenset[str]
    providers: tuple[ProviderSettings, ...]
    resource: str
    tool_scopes: frozenset[str]
    title: str


def access_inputs(
    published: Mapping[str, Any],
    workspace: str,
    slug: str,
    providers: Mapping[str, ProviderSettings],
    tool_scopes: frozenset[str],
    public_url: str,
    path_prefix: str,
) -> AccessInputs:
    """The inputs of a published agent: its ``auth``, the workspace's providers it
    names (a name with no provider, which apply refuses, is skipped), its URL."""
    auth = published.get("auth") or {}
    named = tuple(providers[n] for n in auth.get("providers") or () if n in providers)
    base = public_url.rstrip("/")
    resource = f"{base}{mcp_endpoint_path(path_prefix, workspace, slug)}" if base else ""
    return AccessInputs(
        keys=auth.get("agent_keys", True) is not False,
        scopes=frozenset(auth.get("scopes") or ()),
        providers=named,
        resource=resource,
        tool_scopes=tool_scopes,
        title=published.get("title") or slug,
    )


def agent_access(
    inputs: AccessInputs, old: AgentAccess | None, parts: IdentityParts | None
) -> AgentAccess:
    """The access of ``inputs``; ``old`` itself when it was made of equal inputs."""
    if old is not None and old.made_of == inputs:
        return old
    if not inputs.providers:
        return KEYS_ONLY if inputs.keys else _KEYS_REFUSED
    if not inputs.resource or parts is None:
        # Without CRANK_PUBLIC_URL there is no canonical URL to bind tokens to;
        # one taken from the Host header would let a token for another service in.
        log.warning("identity_needs_public_url", providers=[p.name for p in inputs.providers])
        return KEYS_ONLY if inputs.keys else _KEYS_REFUSED
    origin, path = _split(inputs.resource)
    metadata_url = f"{origin}{WELL_KNOWN}{path}"
    scopes_supported = sorted(inputs.scopes | inputs.tool_scopes)
    document = {
        "resource": inputs.resource,
        "authorization_servers": [p.issuer for p in inputs.providers],
        "scopes_supported": scopes_supported,
        "bearer_methods_supported": ["header"],
        "resource_name": inputs.title,
    }
    challenge = f'Bearer resource_metadata="{metadata_url}"'
    if inputs.scopes:
        challenge += f', scope="{" ".join(sorted(inputs.scopes))}"'
    return AgentAccess(
        keys=inputs.keys,
        scopes=inputs.scopes,
        providers=ProviderSet(inputs.providers, parts),
        resource=inputs.resource,
        metadata_url=metadata_url,
        metadata=msgspec.json.encode(document),
        challenge=challenge,
        made_of=inputs,
    )


def providers_by_name(
    rows: Sequence[Mapping[str, Any]], secrets: Mapping[str, str]
) -> dict[str, ProviderSettings]:
    """A workspace's providers from their rows; the introspection secret opened from
    the workspace's ``secrets`` (a provider whose secret is gone does not introspect)."""
    return {
        r["name"]: ProviderSettings(
            name=r["name"],
            issuer=r["issuer"],
            algorithms=tuple(r["algorithms"]),
            token_types=tuple(r["token_types"]),
            subject_claim=r["subject_claim"],
            groups_claim=r["groups_claim"],
            leeway_s=r["leeway_s"],
            introspection_client_id=r["introspection_client_id"],
            introspection_secret=secrets.get(r["introspection_secret"] or ""),
        )
        for r in rows
    }


def _split(url: str) -> tuple[str, str]:
    scheme, _, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    return f"{scheme}://{host}", f"{slash}{path}"


def _quoted(text: str) -> str:
    # A quoted-string of RFC 9110: no quote, backslash or control character inside.
    return "".join(c for c in text if c not in '"\\' and 0x20 <= ord(c) < 0x7F)[:200]
