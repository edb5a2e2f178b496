"""CHECK violations are the caller's 400, and never carry the failing row anywhere."""

from __future__ import annotations

import pytest
import structlog

from control_plane.errors import ValidationFailed
from control_plane.services.constraints import refuse_check_violations
from shared.db import connect


@pytest.mark.parametrize(
    ("statement", "field"),
    [
        ("INSERT INTO workspaces (slug) VALUES (%s)", "slug"),
        (
            """INSERT INTO secrets (workspace_id, name, ciphertext, nonce, key_id)
               SELECT id, %s, '\\x00', '\\x00', 'k' FROM workspaces""",
            "name",
        ),
    ],
)
async def test_a_check_violation_is_a_field_error_without_the_row(
    database_url: str, statement: str, field: str
) -> None:
    async with await connect(database_url) as conn:
        await conn.execute("INSERT INTO workspaces (slug) VALUES ('acme')")
        with (
            structlog.testing.capture_logs() as logs,
            pytest.raises(ValidationFailed) as refused,
            refuse_check_violations(),
        ):
            await conn.execute(statement, ("Not Allowed\nsk_live_SECRET",))
    assert refused.value.code == "validation_failed"
    assert [e.field for e in refused.value.errors] == [field]
    assert "sk_live_SECRET" not in refused.value.message
    assert refused.value.__suppress_context__  # the driver's DETAIL stays out of tracebacks
    assert logs == []
