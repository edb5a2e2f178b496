"""The pieces ``crank up`` runs on: readiness probes and the embedded PostgreSQL's stop."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from control_plane.cli import devdb
from control_plane.cli.runtime import Supervisor
from shared.embedded import EmbeddedPostgres


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def ready_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/healthz"
    finally:
        server.shutdown()
        server.server_close()


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def test_readiness_probe_ignores_a_proxy_from_the_environment(
    ready_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead_proxy = f"http://127.0.0.1:{_closed_port()}"
    for name in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(name, dead_proxy)
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    supervisor = Supervisor()
    child = supervisor.start(
        "sleeper", [sys.executable, "-c", "import time; time.sleep(30)"], dict(os.environ)
    )
    try:
        supervisor.wait_for_http(child, ready_url, timeout_s=5)  # through the proxy: times out
    finally:
        supervisor.stop_all(timeout_s=5)


def test_a_stale_postmaster_pid_naming_another_program_is_not_signalled(tmp_path: Path) -> None:
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        pgdata = tmp_path / "pgdata"
        pgdata.mkdir()
        (pgdata / "PG_VERSION").write_text("18\n")
        (pgdata / "postmaster.pid").write_text(f"{bystander.pid}\n{pgdata}\n")
        assert devdb.postmaster_pid(pgdata) is None
        devdb.stop_embedded(None, pgdata)
        assert bystander.poll() is None  # still running: never signalled
    finally:
        bystander.kill()
        bystander.wait()


def test_the_stop_is_armed_before_the_start_so_an_interrupted_start_is_stopped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    stops: list[tuple[object, Path]] = []

    def interrupted_start(pgdata: Path) -> EmbeddedPostgres:
        raise KeyboardInterrupt  # Ctrl-C while initdb or pg_ctl runs

    monkeypatch.setattr(devdb, "start_embedded", interrupted_start)
    monkeypatch.setattr(
        devdb, "stop_embedded", lambda server, pgdata: stops.append((server, pgdata))
    )
    with pytest.raises(KeyboardInterrupt), devdb.embedded_postgres(tmp_path / "pgdata"):
        pytest.fail("the block must not run when the start was interrupted")
    assert stops == [(None, tmp_path / "pgdata")]
