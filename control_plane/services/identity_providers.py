"""A workspace's trusted identity providers (docs/architecture.md, "Identity").

One row per provider: its issuer (stored byte for byte, as tokens carry it),
the signing algorithms and token types it may use, the claims that name the
person and their groups, and optional RFC 7662 introspection credentials whose
client secret is the *name* of a workspace secret, never a value. The rules are
``shared.identity.issuers.TrustedIssuer``'s, checked here when a provider is
written. Every change is audited and bumps the catalog, like a publish: the
gateways check tokens against the new settings from their next snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import msgspec
from psycopg import errors as pg_errors

from control_plane.auth import Workspace
from control_plane.errors import Conflict, NotFound, ValidationFailed
from control_plane.etag import Precondition, check_revision, etag
from control_plane.services.agent_identity import refuse_if_named
from control_plane.services.audit import record_change
from shared.db import Connection
from shared.engine.spec import IdentityProviderSpec, IntrospectionSpec
from shared.engine.spec_validation import SECRET_NAME, SLUG, FieldError
from shared.identity.issuers import IssuerConfigError, TrustedIssuer

_COLUMNS: Final = """id, name, issuer, algorithms, token_types, subject_claim, groups_claim,
    leeway_s, introspection_client_id, introspection_secret, revision, created_at, updated_at"""
MAX_CLAIM_CHARS: Final = 128
_NAME_RULE: Final = "1-63 lowercase letters, digits and -, starting with a letter or digit"


class ProviderView(msgspec.Struct, kw_only=True):
    name: str
    issuer: str
    algorithms: list[str]
    token_types: list[str]
    subject_claim: str
    groups_claim: str | None
    leeway_s: int
    introspection: IntrospectionSpec | None
    revision: int
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True)
class ProviderRow:
    id: int
    view: ProviderView

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ProviderRow:
        secret = row["introspection_secret"]
        introspection = (
            None
            if secret is None
            else IntrospectionSpec(client_id=row["introspection_client_id"], client_secret=secret)
        )
        view = ProviderView(
            name=row["name"],
            issuer=row["issuer"],
            algorithms=list(row["algorithms"]),
            token_types=list(row["token_types"]),
            subject_claim=row["subject_claim"],
            groups_claim=row["groups_claim"],
            leeway_s=row["leeway_s"],
            introspection=introspection,
            revision=row["revision"],
            created_at=row["created_at"],
            updated_at=row["updated_at"],
        )
        return cls(row["id"], view)

    @property
    def etag(self) -> str:
        return etag(self.id, self.view.revision)


def _claim_errors(field: str, value: str | None) -> list[FieldError]:
    # An empty subject_claim is TrustedIssuer's to refuse; an empty groups_claim is ours.
    if value is not None and len(value) > MAX_CLAIM_CHARS:
        return [FieldError(field, f"at most {MAX_CLAIM_CHARS} characters")]
    if field == "groups_claim" and value == "":
        return [FieldError(field, "must not be empty (null: no groups claim)")]
    return []


def provider_errors(spec: IdentityProviderSpec) -> list[FieldError]:
    """Every problem of the provider on its own: TrustedIssuer's rules and the name's."""
    errors = [] if SLUG.fullmatch(spec.name) else [FieldError("name", _NAME_RULE)]
    errors += _claim_errors("subject_claim", spec.subject_claim)
    errors += _claim_errors("groups_claim", spec.groups_claim)
    try:
        # The JWKS URI is discovered from the issuer's metadata by the gateway; the
        # issuer stands in for it so TrustedIssuer checks every other rule here.
        TrustedIssuer(
            issuer=spec.issuer,
            jwks_uri=spec.issuer,
            algorithms=tuple(spec.algorithms),
            token_types=tuple(spec.token_types),
            subject_claim=spec.subject_claim,
            groups_claim=spec.groups_claim,
            leeway_s=spec.leeway_s,
        )
    except IssuerConfigError as exc:
        field, _, message = str(exc).partition(": ")
        errors.append(FieldError(field, message))
    if spec.introspection is not None:
        errors += _introspection_shape(spec.introspection)
    return errors


def _introspection_shape(introspection: IntrospectionSpec) -> list[FieldError]:
    errors = []
    if not introspection.client_id:
        errors.append(FieldError("introspection.client_id", "must not be empty"))
    if not SECRET_NAME.fullmatch(introspection.client_secret):
        errors.append(
            FieldError(
                "introspection.client_secret",
                "the name of a workspace secret: 1-128 letters, digits, _, . and -",
            )
        )
    return errors


async def check_provider(conn: Connection, ws: Workspace, spec: IdentityProviderSpec) -> None:
    """ValidationFailed naming each bad field; the introspection secret must exist."""
    errors = provider_errors(spec)
    if not errors and spec.introspection is not None:
        errors = await _introspection_errors(conn, ws, spec.introspection)
    if errors:
        raise ValidationFailed(errors)


async def _introspection_errors(
    conn: Connection, ws: Workspace, introspection: IntrospectionSpec
) -> list[FieldError]:
    name = introspection.client_secret
    cur = await conn.execute(
        "SELECT 1 FROM secrets WHERE workspace_id = %s AND name = %s", (ws.id, name)
    )
    if await cur.fetchone() is None:
        return [
            FieldError(
                "introspection.client_secret",
                f"no secret named {name!r} in workspace {ws.slug!r}; set it first",
            )
        ]
    return []


def _values(settings: IdentityProviderSpec) -> dict[str, Any]:
    introspection = settings.introspection
    return {
        "issuer": settings.issuer,
        "algorithms": list(dict.fromkeys(settings.algorithms)),
        "token_types": list(dict.fromkeys(settings.token_types)),
        "subject_claim": settings.subject_claim,
        "groups_claim": settings.groups_claim,
        "leeway_s": settings.leeway_s,
        "introspection_client_id": introspection.client_id if introspection else None,
        "introspection_secret": introspection.client_secret if introspection else None,
    }


def _audit_details(row: ProviderRow) -> dict[str, Any]:
    # Names only: the introspection secret is a secret's name, never its value.
    return {
        "issuer": row.view.issuer,
        "revision": row.view.revision,
        "introspection": row.view.introspection is not None,
    }


def _duplicate(ws: Workspace, exc: pg_errors.UniqueViolation, name: str, issuer: str) -> Conflict:
    if "issuer" in (exc.diag.constraint_name or ""):
        return Conflict(
            f"another identity provider of workspace {ws.slug!r} has issuer {issuer!r}",
            code="already_exists",
        )
    return Conflict(
        f"identity provider {name!r} already exists in workspace {ws.slug!r}",
        code="already_exists",
    )


async def list_providers(conn: Connection, ws: Workspace) -> list[ProviderView]:
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM identity_providers WHERE workspace_id = %s ORDER BY name",
        (ws.id,),
    )
    return [ProviderRow.from_row(row).view for row in await cur.fetchall()]


async def require_provider(
    conn: Connection, ws: Workspace, name: str, *, lock: bool = False
) -> ProviderRow:
    cur = await conn.execute(
        f"SELECT {_COLUMNS} FROM identity_providers WHERE workspace_id = %s AND name = %s"
        + (" FOR UPDATE" if lock else ""),
        (ws.id, name),
    )
    row = await cur.fetchone()
    if row is None:
        raise NotFound(f"identity provider {name!r} not found in workspace {ws.slug!r}")
    return ProviderRow.from_row(row)


async def create_provider(
    conn: Connection, ws: Workspace, actor: str, spec: IdentityProviderSpec
) -> ProviderRow:
    await check_provider(conn, ws, spec)
    try:
        async with conn.transaction():
            cur = await conn.execute(
                f"""INSERT INTO identity_providers (workspace_id, name, issuer, algorithms,
                        token_types, subject_claim, groups_claim, leeway_s,
                        introspection_client_id, introspection_secret)
                    VALUES (%(ws)s, %(name)s, %(issuer)s, %(algorithms)s, %(token_types)s,
                        %(subject_claim)s, %(groups_claim)s, %(leeway_s)s,
                        %(introspection_client_id)s, %(introspection_secret)s)
                    RETURNING {_COLUMNS}""",
                {"ws": ws.id, "name": spec.name, **_values(spec)},
            )
            row = await cur.fetchone()
    except pg_errors.UniqueViolation as exc:
        raise _duplicate(ws, exc, spec.name, spec.issuer) from None
    assert row is not None
    created = ProviderRow.from_row(row)
    await record_change(
        conn,
        ws,
        actor,
        "identity_provider.create",
        spec.name,
        _audit_details(created),
        notify_gateways=True,
    )
    return created


async def update_provider(
    conn: Connection,
    ws: Workspace,
    actor: str,
    name: str,
    settings: IdentityProviderSpec,
    expected: Precondition | None,
) -> ProviderRow:
    """Replace a provider's settings under ``If-Match`` (``None``: apply, which holds
    the workspace's apply lock); an unchanged write changes nothing."""
    if settings.name != name:
        raise ValidationFailed(
            [
                FieldError(
                    "name", f"the body's name {settings.name!r} differs from the URL's {name!r}"
                )
            ]
        )
    current = await require_provider(conn, ws, name, lock=True)
    if expected is not None:
        check_revision(expected, current.id, current.view.revision, f"identity provider {name!r}")
    await check_provider(conn, ws, settings)
    values = _values(settings)
    if values == _values(as_spec(current.view)):
        return current
    try:
        async with conn.transaction():
            cur = await conn.execute(
                f"""UPDATE identity_providers SET issuer = %(issuer)s,
                        algorithms = %(algorithms)s, token_types = %(token_types)s,
                        subject_claim = %(subject_claim)s, groups_claim = %(groups_claim)s,
                        leeway_s = %(leeway_s)s,
                        introspection_client_id = %(introspection_client_id)s,
                        introspection_secret = %(introspection_secret)s,
                        revision = revision + 1, updated_at = now()
                    WHERE id = %(id)s RETURNING {_COLUMNS}""",
                {"id": current.id, **values},
            )
            row = await cur.fetchone()
    except pg_errors.UniqueViolation as exc:
        raise _duplicate(ws, exc, name, settings.issuer) from None
    assert row is not None
    updated = ProviderRow.from_row(row)
    await record_change(
        conn,
        ws,
        actor,
        "identity_provider.update",
        name,
        _audit_details(updated),
        notify_gateways=True,
    )
    return updated


def as_spec(view: ProviderView) -> IdentityProviderSpec:
    """The provider as the operation file writes it (``crank export``)."""
    return IdentityProviderSpec(
        name=view.name,
        issuer=view.issuer,
        algorithms=view.algorithms,
        token_types=view.token_types,
        subject_claim=view.subject_claim,
        groups_claim=view.groups_claim,
        leeway_s=view.leeway_s,
        introspection=view.introspection,
    )


async def delete_provider(
    conn: Connection, ws: Workspace, actor: str, name: str, expected: Precondition
) -> None:
    current = await require_provider(conn, ws, name, lock=True)
    check_revision(expected, current.id, current.view.revision, f"identity provider {name!r}")
    await refuse_if_named(conn, ws, name)
    await conn.execute("DELETE FROM identity_providers WHERE id = %s", (current.id,))
    await record_change(
        conn,
        ws,
        actor,
        "identity_provider.delete",
        name,
        {"issuer": current.view.issuer},
        notify_gateways=True,
    )
