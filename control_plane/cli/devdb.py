"""The embedded PostgreSQL of ``crank up``: started under the data directory, always stopped.

The server listens on a Unix socket in its data directory only. Its stop is
armed before it starts (``embedded_postgres``), so a Ctrl-C in the middle of
the first start — initdb, pg_ctl — still stops whatever came up. Stopping goes
through the library first; if a postmaster is still running afterwards (the
library skips the stop when an earlier, killed run left its pid in its handle
list, or when it never finished starting), it is shut down here: SIGINT (fast
shutdown), then SIGQUIT — but only a process that is a postgres, since a
stale ``postmaster.pid`` may name a pid that another program has reused.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import structlog

from control_plane.cli.common import CliError
from shared.embedded import EmbeddedPostgres

log = structlog.get_logger(__name__)

# How long a stop waits for the postmaster.pid of a start it interrupted.
_INTERRUPTED_START_GRACE_S = 2.0


def start_embedded(pgdata: Path) -> EmbeddedPostgres:
    log.info("embedded_postgres_starting", pgdata=str(pgdata))
    try:
        return EmbeddedPostgres(pgdata, cleanup="stop")
    except (subprocess.SubprocessError, OSError) as exc:
        raise CliError(
            f"the embedded PostgreSQL did not start ({exc}); its log is {pgdata / 'log'}",
            exit_code=1,
        ) from None


@contextlib.contextmanager
def embedded_postgres(pgdata: Path) -> Iterator[EmbeddedPostgres]:
    """The server, running for the block; stopped after it however the block
    or the start itself ends (an interrupted start included)."""
    server: EmbeddedPostgres | None = None
    try:
        server = start_embedded(pgdata)
        yield server
    finally:
        stop_embedded(server, pgdata)


def process_name(pid: int) -> str | None:
    """The executable name of a live process, or None when there is none."""
    proc = Path("/proc")
    if proc.is_dir():
        try:
            return (proc / str(pid) / "comm").read_text().strip()
        except (FileNotFoundError, ProcessLookupError):
            return None
        except PermissionError:  # pragma: no cover - hardened /proc
            pass
    ps = shutil.which("ps")
    if ps is None:  # pragma: no cover - neither /proc nor ps: cannot tell
        return None
    found = subprocess.run(
        [ps, "-o", "comm=", "-p", str(pid)], capture_output=True, text=True, check=False
    )
    name = found.stdout.strip()
    return Path(name).name if found.returncode == 0 and name else None


def postmaster_pid(pgdata: Path) -> int | None:
    """The pid of the postmaster running on ``pgdata``, or None.

    None too when ``postmaster.pid`` names a process that is not a postgres:
    the file outlived its server and the pid now belongs to someone else.
    """
    try:
        first_line = (pgdata / "postmaster.pid").read_text().split("\n", 1)[0]
        pid = int(first_line)
    except (FileNotFoundError, ValueError):
        return None
    if pid <= 0 or process_name(pid) != "postgres":
        return None
    return pid


def _wait_gone(pgdata: Path, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if postmaster_pid(pgdata) is None:
            return True
        time.sleep(0.1)
    return postmaster_pid(pgdata) is None


def _wait_started(pgdata: Path, timeout_s: float) -> None:
    """Give a postmaster launched by an interrupted pg_ctl time to write its pid file."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and postmaster_pid(pgdata) is None:
        time.sleep(0.1)


def stop_embedded(server: EmbeddedPostgres | None, pgdata: Path) -> None:
    """Stop the server; ``server`` None: its start was interrupted or failed."""
    if server is not None:
        try:
            server.stop()
        except Exception:  # the fallback below still stops it
            log.exception("embedded_postgres_stop_failed")
    elif (pgdata / "PG_VERSION").exists():  # initdb finished, so pg_ctl may have run
        _wait_started(pgdata, _INTERRUPTED_START_GRACE_S)
    for sig, wait_s in ((signal.SIGINT, 20.0), (signal.SIGQUIT, 5.0)):
        pid = postmaster_pid(pgdata)
        if pid is None:
            break
        log.warning("embedded_postgres_still_running", pid=pid, signal=sig.name)
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        except PermissionError:
            log.error("embedded_postgres_not_ours", pid=pid)
            break
        if _wait_gone(pgdata, wait_s):
            break
    log.info("embedded_postgres_stopped", pgdata=str(pgdata))
