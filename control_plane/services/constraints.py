"""CHECK constraints of the schema, translated into field errors.

The Python checks (``shared/engine/spec_validation.py``, the services) run first and
mirror every CHECK, so a violation means the two disagree; it is still the
caller's value that is wrong, so it is a 400, not a 500. The driver's message
is never passed on or logged: its DETAIL line holds the whole failing row,
ciphertexts and all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from psycopg import errors as pg_errors

from control_plane.errors import ValidationFailed
from shared.engine.spec_validation import FieldError

# Postgres names a column's CHECK "<table>_<column>_check".
_FIELDS = {
    "workspaces_slug_check": "slug",
    "workspace_members_role_check": "role",
    "operations_name_check": "name",
    "operation_versions_version_check": "version",
    "agents_slug_check": "slug",
    "api_keys_kind_check": "kind",
    "secrets_name_check": "name",
}


@contextlib.contextmanager
def refuse_check_violations() -> Iterator[None]:
    """Turn a CHECK violation inside the block into ``ValidationFailed``."""
    try:
        yield
    except pg_errors.CheckViolation as exc:
        field = _FIELDS.get(exc.diag.constraint_name or "", "")
        raise ValidationFailed(
            [FieldError(field, "the value is not allowed here (a database check refused it)")]
        ) from None
