"""Who called, as Crank records it: a person's issuer, subject, display name and
client, or the agent key.

A token's principal (``shared.identity.access_tokens.Principal``) also holds its
groups, scopes and expiry, which decide access and are gone with the call. The call
log, approvals, traces and log lines keep only these four fields, never the token
(docs/architecture.md, "Identity"). Both processes read them: the gateway writes
them, the control plane shows and filters by them.
"""

from __future__ import annotations

from typing import Any

import msgspec


class PrincipalRecord(msgspec.Struct, frozen=True, kw_only=True):
    """Issuer + subject name the person; ``name`` and ``client_id`` are what the
    token said at the time (either may be absent)."""

    issuer: str
    subject: str
    name: str | None = None  # the token's display name: name, email or preferred_username
    client_id: str | None = None  # the OAuth client it came through

    @property
    def log_value(self) -> str:
        """The ``principal`` of a log line: "issuer subject"."""
        return f"{self.issuer} {self.subject}"


def log_fields(key_id: int | None, person: PrincipalRecord | None) -> dict[str, Any]:
    """Who called, as bound to a log line's context: ``key_id``, or ``principal``
    ("issuer subject") and ``client_id``. Never the token."""
    if person is None:
        return {"key_id": key_id}
    return {"principal": person.log_value, "client_id": person.client_id}


# The log keys ``log_fields`` binds, to unbind them all.
LOG_KEYS = ("key_id", "principal", "client_id")


# The columns that hold a PrincipalRecord on call_log and approvals (migration 0015).
COLUMNS = ("principal_issuer", "principal_subject", "principal_name", "client_id")


def principal_columns(record: PrincipalRecord | None) -> tuple[str | None, ...]:
    """The four column values, in COLUMNS' order (all NULL for a key's call)."""
    if record is None:
        return (None, None, None, None)
    return (record.issuer, record.subject, record.name, record.client_id)


def principal_of_row(row: dict[str, Any]) -> PrincipalRecord | None:
    """The record of a row read with COLUMNS; None where no person asked."""
    issuer, subject = row["principal_issuer"], row["principal_subject"]
    if issuer is None or subject is None:
        return None
    return PrincipalRecord(
        issuer=issuer, subject=subject, name=row["principal_name"], client_id=row["client_id"]
    )


class KeyRequester(msgspec.Struct, frozen=True, kw_only=True):
    """A call or approval an agent key asked for: the key as the console lists it."""

    key: str | None  # its display prefix; None once the key is deleted


# Who asked, as the approval record and the console show it: a person (issuer,
# subject, name, client_id) or a key; None for a row that names neither.
Requester = PrincipalRecord | KeyRequester | None


def requester_of(row: dict[str, Any]) -> Requester:
    """Who asked, from a row with COLUMNS, ``key_id`` and ``requester_key`` (the key's
    prefix): the person when a token authenticated, else the key."""
    person = principal_of_row(row)
    if person is not None:
        return person
    if row["key_id"] is None:
        return None
    return KeyRequester(key=row["requester_key"])
