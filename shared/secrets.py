"""Opening workspace secrets: the one place sealed rows of ``secrets`` are decrypted.

The gateway's snapshot opens every published workspace's secrets at each
reload, the approval worker one workspace's when the snapshot does not hold
the agent, try-it the one secret an operation names, the admin API one secret to tell
whether a new value changes it. A row that cannot be
opened (sealed with a key no longer configured, or tampered with) is skipped
and its name logged, never a value; a call that needs it then answers
``secret_missing``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from typing import Any

import structlog

from shared.crypto import CryptoError, Sealed, SecretBox, secret_associated_data
from shared.db import Connection

log = structlog.get_logger(__name__)

_WORKSPACE_SQL = """
SELECT workspace_id, name, ciphertext, nonce, key_id FROM secrets
 WHERE workspace_id = %(ws)s AND (%(names)s::text[] IS NULL OR name = ANY(%(names)s))
"""


def open_secret(row: Mapping[str, Any], box: SecretBox, workspace_id: int) -> str | None:
    """One row of ``secrets`` (name, ciphertext, nonce, key_id) opened; None when it
    cannot be (its name is logged, never a value)."""
    name = row["name"]
    sealed = Sealed(bytes(row["ciphertext"]), bytes(row["nonce"]), row["key_id"])
    try:
        return box.open(sealed, secret_associated_data(workspace_id, name))
    except CryptoError:
        log.error("secret_unreadable", workspace_id=workspace_id, secret=name)
        return None


def open_secrets(rows: Iterable[Mapping[str, Any]], box: SecretBox) -> dict[int, dict[str, str]]:
    """Rows of ``secrets`` (workspace_id, name, ciphertext, nonce, key_id) opened:
    per workspace id, the values by name."""
    opened: dict[int, dict[str, str]] = {}
    for row in rows:
        workspace_id = row["workspace_id"]
        value = open_secret(row, box, workspace_id)
        if value is not None:
            opened.setdefault(workspace_id, {})[row["name"]] = value
    return opened


async def load_secrets(
    conn: Connection, box: SecretBox, workspace_id: int, names: Collection[str] | None = None
) -> dict[str, str]:
    """One workspace's secrets (only ``names``, when given), opened."""
    cur = await conn.execute(
        _WORKSPACE_SQL, {"ws": workspace_id, "names": None if names is None else list(names)}
    )
    return open_secrets(await cur.fetchall(), box).get(workspace_id, {})


__all__ = ["load_secrets", "open_secret", "open_secrets"]
