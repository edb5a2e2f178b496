"""The single-process commands: ``crank migrate``, ``crank control-plane``, ``crank mcp-server``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

from tests.support.db import TEST_SECRET_KEY
from tests.support.processes import accepts_connections, descendants, free_port, running


def crank_env(**overrides: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
    return env | overrides


def crank(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "control_plane.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_migrate_applies_once_then_finds_nothing_to_do(empty_database_url: str) -> None:
    env = crank_env(CRANK_DATABASE_URL=empty_database_url)
    first = crank("migrate", env=env)
    second = crank("migrate", env=env)

    assert first.returncode == 0, first.stderr
    assert "migrations: applied 0001_core" in first.stdout
    assert second.returncode == 0, second.stderr
    assert second.stdout.strip() == "migrations: nothing to apply, the schema is up to date"


def test_migrate_without_a_database_url_exits_2() -> None:
    run = crank("migrate", env=crank_env())

    assert run.returncode == 2
    assert "CRANK_DATABASE_URL is not set" in run.stderr


@pytest.mark.parametrize("name", ["mcp-server", "gateway"])
def test_gateway_without_a_secret_key_exits_2(name: str, database_url: str) -> None:
    run = crank(name, env=crank_env(CRANK_DATABASE_URL=database_url))

    assert run.returncode == 2
    assert "CRANK_SECRET_KEY" in run.stderr
    assert run.stdout == ""


def test_control_plane_without_a_secret_key_exits_2(database_url: str) -> None:
    run = crank("control-plane", env=crank_env(CRANK_DATABASE_URL=database_url))

    assert run.returncode == 2
    assert "CRANK_SECRET_KEY" in run.stderr


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert process.poll() is None, "the server command exited early"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:  # noqa: S310 - loopback
                if response.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError):
            pass
        time.sleep(0.2)
    pytest.fail(f"{url} did not answer within {timeout_s} s")


@pytest.mark.parametrize(
    ("command", "port_variable"),
    [
        ("control-plane", "CRANK_CONTROL_PLANE_PORT"),
        ("mcp-server", "CRANK_GATEWAY_PORT"),
        ("gateway", "CRANK_GATEWAY_PORT"),
    ],
)
def test_server_command_serves_until_sigterm(
    database_url: str, command: str, port_variable: str
) -> None:
    port = free_port()
    env = crank_env(
        CRANK_DATABASE_URL=database_url,
        CRANK_SECRET_KEY=TEST_SECRET_KEY,
        CRANK_METRICS_PORT=str(free_port()),
        **{port_variable: str(port)},
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "control_plane.cli", command],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers: set[int] = set()
    try:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        workers = descendants(process.pid)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=30) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for pid in workers:
            if running(pid):
                os.kill(pid, signal.SIGKILL)

    assert [pid for pid in workers if running(pid)] == []
    assert not accepts_connections(port)
