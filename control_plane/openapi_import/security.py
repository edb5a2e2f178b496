"""Security schemes → ``request.auth`` naming a workspace secret to be set.

Crank sends credentials from an encrypted workspace secret in a header or a
query parameter (``shared.engine.spec.AuthSpec``), so:

- ``http`` bearer → ``bearer``; ``http`` basic (2.0 ``basic``) → ``basic``
  (the secret is ``user:password``);
- ``apiKey`` in a header → ``header`` with that header name; in the query →
  ``query`` with that parameter name;
- ``oauth2`` and ``openIdConnect`` → ``bearer``: store an access token,
  Crank does not run the OAuth flow;
- ``apiKey`` in a cookie, and other ``http`` schemes, cannot be sent: the
  operation is imported without auth and the report says why.

The first alternative of the operation's ``security`` (else the document's)
that can be sent wins; ``{}`` (anonymous allowed) first means no auth. An
alternative that needs several schemes at once sends the first one only.
The secret is named ``<api>_<scheme>`` in snake_case, ``<api>`` being the
name prefix or the document title.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from control_plane.openapi_import.naming import snake_case
from shared.engine.spec import AuthSpec
from shared.engine.spec_validation import QUERY_NAME


@dataclass(frozen=True, slots=True)
class AuthChoice:
    """The ``request.auth`` chosen for an operation (None: sent without), and notes on why."""

    auth: AuthSpec | None
    scheme: str | None  # the scheme's name in the document
    description: str  # what the secret holds
    notes: tuple[str, ...] = ()


def _secret_name(api: str, scheme: str) -> str:
    name = "_".join(p for p in (api, snake_case(scheme) or "credential") if p)
    return name[:128]


def _map(name: str, scheme: dict[str, Any], api: str) -> tuple[AuthSpec | None, str, str | None]:
    """(auth, description, why not) for one scheme."""
    kind = str(scheme.get("type", "")).lower()
    secret = _secret_name(api, name)
    if kind == "http":
        http = str(scheme.get("scheme", "")).lower()
        if http == "bearer":
            return AuthSpec(type="bearer", secret=secret), "the bearer token", None
        if http == "basic":
            return AuthSpec(type="basic", secret=secret), "user:password", None
        return None, "", f"HTTP {http or '?'} authentication is not supported"
    if kind == "basic":
        return AuthSpec(type="basic", secret=secret), "user:password", None
    if kind == "apikey":
        where = str(scheme.get("in", "")).lower()
        header = scheme.get("name")
        if where == "header" and isinstance(header, str) and header:
            auth = AuthSpec(type="header", name=header, secret=secret)
            return auth, f"the API key sent in {header}", None
        if where == "query" and isinstance(header, str) and QUERY_NAME.fullmatch(header):
            auth = AuthSpec(type="query", name=header, secret=secret)
            return auth, f"the API key sent in the query parameter {header}", None
        return None, "", f"an API key in the {where or '?'} cannot be sent from a secret"
    if kind in ("oauth2", "openidconnect"):
        auth = AuthSpec(type="bearer", secret=secret)
        return auth, "an OAuth access token (Crank does not run the OAuth flow)", None
    return None, "", f"security scheme type {kind or '?'} is not supported"


def sent_by_auth(location: str, name: str, auth: AuthSpec | None) -> bool:
    """Whether ``auth`` itself sends the parameter (documents often also declare the
    API key as a parameter): the operation then takes no argument for it."""
    if auth is None:
        return False
    if auth.type == "query":
        return location == "query" and name == auth.name
    sent = auth.name if auth.type == "header" else "Authorization"
    return location == "header" and name.lower() == (sent or "").lower()


def choose_auth(requirements: Any, schemes: dict[str, Any], api: str) -> AuthChoice:
    """The first alternative of ``requirements`` Crank can send (see the module docstring)."""
    if not isinstance(requirements, list) or not requirements:
        return AuthChoice(None, None, "")
    reasons: list[str] = []
    for requirement in requirements:
        if not isinstance(requirement, dict):
            continue
        if not requirement:
            return AuthChoice(None, None, "")  # anonymous access is one of the options
        for index, name in enumerate(requirement):
            scheme = schemes.get(name)
            if not isinstance(scheme, dict):
                reasons.append(f"security scheme {name!r} is not defined")
                continue
            auth, description, why = _map(str(name), scheme, api)
            if auth is None:
                reasons.append(f"{name}: {why}")
                continue
            notes: list[str] = []
            others = [str(n) for i, n in enumerate(requirement) if i != index]
            if others:
                notes.append(f"also requires {', '.join(others)}, which is not sent")
            return AuthChoice(auth, str(name), description, tuple(notes))
    return AuthChoice(None, None, "", tuple(reasons))
