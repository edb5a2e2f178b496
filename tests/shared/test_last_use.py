from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, cast

import structlog
from psycopg_pool import AsyncConnectionPool

from shared.db import Connection
from shared.last_use import LastUseRecorder


class _DownPool:
    """A pool whose database is gone."""

    def connection(self) -> AbstractAsyncContextManager[Any]:
        raise OSError("connection refused")


async def test_a_failing_final_flush_on_stop_is_logged_not_swallowed() -> None:
    recorder = LastUseRecorder("api_keys", interval_s=3600)
    pool = cast(AsyncConnectionPool[Connection], _DownPool())
    recorder.start(pool)
    recorder.mark(7)
    with structlog.testing.capture_logs() as logs:
        await recorder.stop(pool)
    assert [(e["event"], e["log_level"], e["table"]) for e in logs] == [
        ("last_use_final_flush_failed", "error", "api_keys")
    ]
    assert "exc_info" in logs[0]
