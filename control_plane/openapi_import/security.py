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
whose schemes can all be sent wins, as one binding or a list of several
(``{}``, anonymous allowed, first means no auth); else the first that can
be sent in part, with a note on what is not sent. The secret is named ``<api>_<scheme>`` in snake_case, ``<api>`` being the
name prefix or the document title.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from control_plane.openapi_import.naming import snake_case
from shared.engine.spec import AuthSpec
from shared.engine.spec_validation import QUERY_NAME


@dataclass(frozen=True, slots=True)
class Binding:
    """One security scheme sent from a workspace secret."""

    auth: AuthSpec
    scheme: str  # the scheme's name in the document
    description: str  # what the secret holds


@dataclass(frozen=True, slots=True)
class AuthChoice:
    """The bindings chosen for an operation (none: sent without auth), and notes on why."""

    bindings: tuple[Binding, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def auth(self) -> AuthSpec | list[AuthSpec] | None:
        """``request.auth``: nothing, one binding, or a list of several."""
        if len(self.bindings) <= 1:
            return self.bindings[0].auth if self.bindings else None
        return [binding.auth for binding in self.bindings]


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


def sent_by_auth(location: str, name: str, choice: AuthChoice) -> bool:
    """Whether the chosen auth itself sends the parameter (documents often also declare
    the API key as a parameter): the operation then takes no argument for it."""
    return (location, name if location == "query" else name.lower()) in map(
        _slot, (binding.auth for binding in choice.bindings)
    )


def _slot(auth: AuthSpec) -> tuple[str, str]:
    """Where a binding puts its credential; two bindings cannot share one."""
    if auth.type == "query":
        return "query", auth.name or ""
    if auth.type == "header" and auth.name:
        return "header", auth.name.lower()
    return "header", "authorization"


def _bind(
    requirement: dict[Any, Any], schemes: dict[str, Any], api: str, reasons: list[str]
) -> tuple[list[Binding], list[str]]:
    """The bindings of one alternative's schemes, and the names of those not sent."""
    bindings: list[Binding] = []
    missing: list[str] = []
    for name in map(str, requirement):
        scheme = schemes.get(name)
        if not isinstance(scheme, dict):
            reasons.append(f"security scheme {name!r} is not defined")
            missing.append(name)
            continue
        auth, description, why = _map(name, scheme, api)
        if auth is not None and _slot(auth) in map(_slot, (b.auth for b in bindings)):
            auth, why = None, "another scheme of the same requirement sends the same field"
        if auth is None:
            reasons.append(f"{name}: {why}")
            missing.append(name)
        else:
            bindings.append(Binding(auth, name, description))
    return bindings, missing


def choose_auth(requirements: Any, schemes: dict[str, Any], api: str) -> AuthChoice:
    """The first alternative of ``requirements`` Crank can send (see the module docstring)."""
    if not isinstance(requirements, list) or not requirements:
        return AuthChoice()
    reasons: list[str] = []
    partial: AuthChoice | None = None
    for requirement in requirements:
        if not isinstance(requirement, dict):
            continue
        if not requirement:
            return AuthChoice()  # anonymous access is one of the options
        bindings, missing = _bind(requirement, schemes, api, reasons)
        if not missing:
            return AuthChoice(tuple(bindings))
        if bindings and partial is None:
            note = f"also requires {', '.join(missing)}, which is not sent"
            partial = AuthChoice(tuple(bindings), (note,))
    return partial or AuthChoice(notes=tuple(reasons))
