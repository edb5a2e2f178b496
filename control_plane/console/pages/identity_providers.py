"""The Identity providers page: the OpenID Connect / OAuth providers whose tokens the
workspace's agents may accept (docs/architecture.md, "Identity").

Everyone with access reads them and which agents name each; owners add, edit and
delete them, as in the admin API (control_plane/routes/identity_providers.py),
through the same service, so its checks (TrustedIssuer's rules, an introspection
secret that exists, no delete while an agent names the provider) hold here too.
Edits and deletes carry the provider's ETag as If-Match. The introspection client
secret is chosen by the name of a workspace secret; no value is ever shown.
"""

from __future__ import annotations

from typing import Any, Final

from litestar import Request, get, post
from litestar.datastructures import FormMultiDict
from litestar.params import FromPath, FromQuery
from litestar.response import Redirect, Template

from control_plane.auth import Role, Workspace
from control_plane.console.forms import (
    ETAG_FIELD,
    STALE_MESSAGE,
    errors_at,
    is_stale,
    precondition,
    read_form,
    text,
    values,
)
from control_plane.console.outcomes import confirmation
from control_plane.console.outcomes import done as done_redirect
from control_plane.console.rendering import page
from control_plane.deps import Caller, CurrentWorkspace, DbConn
from control_plane.errors import Conflict, ValidationFailed
from control_plane.services.agent_identity import agents_naming
from control_plane.services.identity_providers import (
    MAX_CLAIM_CHARS,
    ProviderRow,
    ProviderView,
    as_spec,
    create_provider,
    delete_provider,
    list_providers,
    require_provider,
    update_provider,
)
from control_plane.services.secrets import list_secrets
from shared.db import Connection
from shared.engine.spec import IdentityProviderSpec, IntrospectionSpec
from shared.engine.spec_validation import FieldError
from shared.identity.issuers import (
    ASYMMETRIC_ALGORITHMS,
    DEFAULT_ALGORITHMS,
    MAX_LEEWAY_S,
    TOKEN_TYPES,
)

DONE: Final = {
    "created": "Identity provider added. An agent accepts its tokens once the agent names it.",
    "saved": "Identity provider saved: the gateways get it within a catalog refresh.",
    "unchanged": "Nothing changed: the provider already had these settings.",
    "deleted": "Identity provider deleted.",
}
# The form's fields, named by the spec's paths so the service's errors land beside them.
FIELDS: Final = (
    "name",
    "issuer",
    "algorithms",
    "token_types",
    "subject_claim",
    "groups_claim",
    "leeway_s",
    "introspection.client_id",
    "introspection.client_secret",
)
# The defaults first, in their order, then the asymmetric algorithms they leave out.
ALGORITHM_CHOICES: Final = (
    *DEFAULT_ALGORITHMS,
    *sorted(ASYMMETRIC_ALGORITHMS - set(DEFAULT_ALGORITHMS)),
)
TOKEN_TYPE_CHOICES: Final = tuple(sorted(TOKEN_TYPES, key=str.lower))  # at+jwt first


def providers_path(ws: Workspace) -> str:
    return f"/ui/w/{ws.slug}/identity-providers"


def _provider_path(ws: Workspace, name: str) -> str:
    return f"{providers_path(ws)}/{name}"


def _form_of(spec: IdentityProviderSpec) -> dict[str, Any]:
    """A provider's settings as the form's fields hold them."""
    introspection = spec.introspection
    return {
        "name": spec.name,
        "issuer": spec.issuer,
        "algorithms": list(spec.algorithms),
        "token_types": list(spec.token_types),
        "subject_claim": spec.subject_claim,
        "groups_claim": spec.groups_claim or "",
        "leeway_s": str(spec.leeway_s),
        "introspection.client_id": introspection.client_id if introspection else "",
        "introspection.client_secret": introspection.client_secret if introspection else "",
    }


def _submitted(form: FormMultiDict) -> dict[str, Any]:
    """What the form posted, kept as typed for a page that refuses it."""
    found: dict[str, Any] = {name: text(form, name) for name in FIELDS}
    found["algorithms"] = values(form, "algorithms")
    found["token_types"] = values(form, "token_types")
    return found


def _spec(submitted: dict[str, Any], name: str) -> IdentityProviderSpec:
    """The provider the form describes; the service judges everything but the leeway's
    being a number. Both introspection fields empty: no introspection."""
    try:
        leeway_s = int(submitted["leeway_s"])
    except ValueError:
        raise ValidationFailed(
            [FieldError("leeway_s", f"a whole number of seconds, 0 to {MAX_LEEWAY_S}")]
        ) from None
    client_id = submitted["introspection.client_id"]
    client_secret = submitted["introspection.client_secret"]
    introspection = (
        IntrospectionSpec(client_id=client_id, client_secret=client_secret)
        if client_id or client_secret
        else None
    )
    return IdentityProviderSpec(
        name=name,
        issuer=submitted["issuer"],
        algorithms=submitted["algorithms"],
        token_types=submitted["token_types"],
        subject_claim=submitted["subject_claim"],
        groups_claim=submitted["groups_claim"] or None,
        leeway_s=leeway_s,
        introspection=introspection,
    )


def _form_context(secret_names: list[str]) -> dict[str, Any]:
    return {
        "secret_names": secret_names,
        "algorithm_choices": ALGORITHM_CHOICES,
        "token_type_choices": TOKEN_TYPE_CHOICES,
        "max_claim": MAX_CLAIM_CHARS,
        "max_leeway": MAX_LEEWAY_S,
    }


async def _secret_names(conn: Connection, ws: Workspace) -> list[str]:
    return [secret.name for secret in await list_secrets(conn, ws.id)]


async def _list_page(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    *,
    status_code: int = 200,
    errors: dict[str, str] | None = None,
    form: dict[str, Any] | None = None,
    done: str = "",
) -> Template:
    # One look-up per provider for the agents naming it: a workspace trusts a few.
    providers = await list_providers(conn, ws)
    return page(
        request,
        "identity_providers.html",
        status_code=status_code,
        providers=[(p, await agents_naming(conn, ws, p.name)) for p in providers],
        errors=errors or {},
        form=form or _form_of(IdentityProviderSpec(name="", issuer="")),
        done=DONE.get(done, ""),
        **_form_context(await _secret_names(conn, ws)),
    )


async def _provider_page(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    row: ProviderRow,
    *,
    status_code: int = 200,
    errors: dict[str, str] | None = None,
    form: dict[str, Any] | None = None,
    stale: bool = False,
    done: str = "",
) -> Template:
    provider: ProviderView = row.view
    return page(
        request,
        "identity_provider.html",
        status_code=status_code,
        provider=provider,
        agents=await agents_naming(conn, ws, provider.name),
        etag=row.etag,
        errors=errors or {},
        form=form or _form_of(as_spec(provider)),
        stale=STALE_MESSAGE if stale else "",
        done=DONE.get(done, ""),
        **_form_context(await _secret_names(conn, ws)),
    )


@get("/w/{workspace:str}/identity-providers", access=Role.VIEWER)
async def identity_providers(
    request: Request[Any, Any, Any], ws: CurrentWorkspace, conn: DbConn, done: FromQuery[str] = ""
) -> Template:
    return await _list_page(request, ws, conn, done=done)


@post("/w/{workspace:str}/identity-providers", access=Role.OWNER)
async def create(
    request: Request[Any, Any, Any], ws: CurrentWorkspace, conn: DbConn, principal: Caller
) -> Template | Redirect:
    submitted = _submitted(await read_form(request))
    try:
        await create_provider(conn, ws, principal.actor, _spec(submitted, submitted["name"]))
    except (ValidationFailed, Conflict) as exc:  # a taken name or issuer: above the form
        return await _list_page(
            request,
            ws,
            conn,
            status_code=exc.status_code,
            errors=errors_at(exc, FIELDS),
            form=submitted,
        )
    return done_redirect(providers_path(ws), "created")


@get("/w/{workspace:str}/identity-providers/{name:str}", access=Role.VIEWER)
async def provider(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    name: FromPath[str],
    conn: DbConn,
    done: FromQuery[str] = "",
) -> Template:
    row = await require_provider(conn, ws, name)
    return await _provider_page(request, ws, conn, row, done=done)


async def _refused(
    request: Request[Any, Any, Any],
    ws: Workspace,
    conn: Connection,
    name: str,
    exc: ValidationFailed | Conflict,
    submitted: dict[str, Any] | None = None,
) -> Template:
    """The provider's current page after a write that wrote nothing: a stale page (409,
    the current settings shown), settings the service refused (400, what was typed
    kept; a taken issuer, 409), or a delete refused while agents name the provider
    (409, the API's words above the page)."""
    row = await require_provider(conn, ws, name)
    if is_stale(exc):
        return await _provider_page(request, ws, conn, row, status_code=409, stale=True)
    return await _provider_page(
        request,
        ws,
        conn,
        row,
        status_code=exc.status_code,
        errors=errors_at(exc, FIELDS),
        form=submitted,
    )


@post("/w/{workspace:str}/identity-providers/{name:str}", access=Role.OWNER)
async def save(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    name: FromPath[str],
    conn: DbConn,
    principal: Caller,
) -> Template | Redirect:
    form = await read_form(request)
    submitted = {**_submitted(form), "name": name}  # the URL names the provider
    try:
        saved = await update_provider(
            conn, ws, principal.actor, name, _spec(submitted, name), precondition(form)
        )
    except (ValidationFailed, Conflict) as exc:
        return await _refused(request, ws, conn, name, exc, submitted)
    unchanged = saved.etag == text(form, ETAG_FIELD)
    return done_redirect(_provider_path(ws, name), "unchanged" if unchanged else "saved")


@get("/w/{workspace:str}/identity-providers/{name:str}/delete", access=Role.OWNER)
async def confirm_delete(
    request: Request[Any, Any, Any], ws: CurrentWorkspace, name: FromPath[str], conn: DbConn
) -> Template:
    row = await require_provider(conn, ws, name)
    return confirmation(
        request,
        heading="Delete identity provider",
        question=(
            f"Stop trusting {name} ({row.view.issuer})? No agent can then accept its "
            "tokens. An agent that names it must drop it first: the delete is refused "
            "until then."
        ),
        action=f"{_provider_path(ws, name)}/delete",
        button="Delete provider",
        cancel=_provider_path(ws, name),
        etag=row.etag,
    )


@post("/w/{workspace:str}/identity-providers/{name:str}/delete", access=Role.OWNER)
async def delete(
    request: Request[Any, Any, Any],
    ws: CurrentWorkspace,
    name: FromPath[str],
    conn: DbConn,
    principal: Caller,
) -> Template | Redirect:
    form = await read_form(request)
    try:
        await delete_provider(conn, ws, principal.actor, name, precondition(form))
    except Conflict as exc:
        return await _refused(request, ws, conn, name, exc)
    return done_redirect(providers_path(ws), "deleted")


handlers: list[Any] = [identity_providers, create, provider, save, confirm_delete, delete]
