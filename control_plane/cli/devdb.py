"""The embedded PostgreSQL of ``crank up``: started under the data directory, always stopped.

The server listens on a Unix socket in its data directory only. Stopping goes
through the library first; if a postmaster is still running afterwards (the
library skips the stop when an earlier, killed run left its pid in its handle
list), it is shut down here: SIGINT (fast shutdown), then SIGQUIT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import structlog

from control_plane.cli.common import CliError
from shared.embedded import EmbeddedPostgres

log = structlog.get_logger(__name__)


def start_embedded(pgdata: Path) -> EmbeddedPostgres:
    log.info("embedded_postgres_starting", pgdata=str(pgdata))
    try:
        return EmbeddedPostgres(pgdata, cleanup="stop")
    except (subprocess.SubprocessError, OSError) as exc:
        raise CliError(
            f"the embedded PostgreSQL did not start ({exc}); its log is {pgdata / 'log'}",
            exit_code=1,
        ) from None


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid of the postmaster running on ``pgdata``, or None."""
    try:
        first_line = (pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        pid = int(first_line)
    except (FileNotFoundError, ValueError):
        return None
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # pragma: no cover - alive, owned by someone else
        return pid
    return pid


def _wait_gone(pgdata: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if postmaster_pid(pgdata) is None:
            return True
        time.sleep(0.1)
    return postmaster_pid(pgdata) is None


def stop_embedded(server: EmbeddedPostgres, pgdata: Path) -> None:
    try:
        server.stop()
    except Exception:  # the fallback below still stops it
        log.exception("embedded_postgres_stop_failed")
    for sig, wait_s in ((signal.SIGINT, 20.0), (signal.SIGQUIT, 5.0)):
        pid = postmaster_pid(pgdata)
        if pid is None:
            break
        log.warning("embedded_postgres_still_running", pid=pid, signal=sig.name)
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        if _wait_gone(pgdata, wait_s):
            break
    log.info("embedded_postgres_stopped", pgdata=str(pgdata))
