"""The single-process commands: ``crank migrate``, ``crank control-plane``, ``crank mcp-server``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

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


@contextlib.contextmanager
def serving(command: str, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """``crank COMMAND`` until the block ends; killed, with its workers, if still running."""
    process = subprocess.Popen(
        [sys.executable, "-m", "control_plane.cli", command],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    workers = descendants(process.pid)
    try:
        yield process
    finally:
        if process.poll() is None:
            workers |= descendants(process.pid)
            process.kill()
            process.wait()
            for pid in workers:
                if running(pid):
                    os.kill(pid, signal.SIGKILL)


def stop_with_sigterm(process: subprocess.Popen[bytes]) -> set[int]:
    """SIGTERM ``process`` and wait for its clean exit; returns the workers it had."""
    workers = descendants(process.pid)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
    return workers


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
        # One worker: granian does not stop a worker still starting when SIGTERM comes.
        CRANK_GATEWAY_WORKERS="1",
        **{port_variable: str(port)},
    )
    with serving(command, env) as process:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        workers = stop_with_sigterm(process)

    assert [pid for pid in workers if running(pid)] == []
    assert not accepts_connections(port)


def _free_port_pair() -> int:
    """A port whose successor is free too (worker i serves metrics on the base + i)."""
    for _ in range(50):
        port = free_port()
        if port < 65535 and not accepts_connections(port + 1):
            return port
    pytest.fail("no two consecutive free ports")


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def test_gateway_workers_each_serve_the_endpoint_and_their_own_metrics_port(
    database_url: str,
) -> None:
    port, metrics_port = free_port(), _free_port_pair()
    env = crank_env(
        CRANK_DATABASE_URL=database_url,
        CRANK_SECRET_KEY=TEST_SECRET_KEY,
        CRANK_GATEWAY_PORT=str(port),
        CRANK_METRICS_PORT=str(metrics_port),
        CRANK_GATEWAY_WORKERS="2",
    )
    with serving("mcp-server", env) as process:
        _wait_ready(f"http://127.0.0.1:{port}/readyz", process)
        deadline = time.monotonic() + 30
        while not all(accepts_connections(p) for p in (metrics_port, metrics_port + 1)):
            assert time.monotonic() < deadline, "a worker serves no metrics"
            time.sleep(0.2)
        served = [_metrics(p) for p in (metrics_port, metrics_port + 1)]
        workers = stop_with_sigterm(process)

    assert all("crank_snapshot_version" in text for text in served)
    assert len(workers) >= 2  # granian's two workers (and any helper processes)
