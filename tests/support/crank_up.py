"""``crank up`` as a user runs it, for tests: a real process on its own data directory
and ports, its banner read line by line, and nothing left running afterwards."""

from __future__ import annotations

import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support.processes import descendants, free_port, running

READY_TIMEOUT_S = 90
STOP_TIMEOUT_S = 45
READY_MARKER = "Press Ctrl-C to stop everything."


def postmaster(pgdata: Path) -> tuple[int, str] | None:
    """(pid, socket directory) of the embedded server, from postmaster.pid."""
    try:
        lines = (pgdata / "postmaster.pid").read_text().splitlines()
    except FileNotFoundError:
        return None
    return int(lines[0]), lines[4]


class CrankUp:
    """One ``crank up`` process; its stdout is read line by line on a thread."""

    def __init__(
        self, data_dir: Path, ports: dict[str, int], extra_env: dict[str, str] | None = None
    ) -> None:
        self.data_dir = data_dir
        self.ports = ports
        env = {k: v for k, v in os.environ.items() if not k.startswith("CRANK_")}
        env |= {
            "CRANK_DATA_DIR": str(data_dir),
            "CRANK_CONTROL_PLANE_PORT": str(ports["control_plane"]),
            "CRANK_GATEWAY_PORT": str(ports["gateway"]),
            "CRANK_DEMO_SALES_PORT": str(ports["sales"]),
            "CRANK_METRICS_PORT": str(ports.get("metrics", free_port())),
            **(extra_env or {}),
        }
        self.stderr_path = data_dir.parent / f"{data_dir.name}-stderr.log"
        self._stderr = self.stderr_path.open("ab")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "control_plane.cli", "up"],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        self.output: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        with self.process.stdout:
            for line in self.process.stdout:
                self.lines.put(line)
        self.lines.put(None)

    def wait_ready(self, marker: str = READY_MARKER) -> str:
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if line is None:
                break
            self.output.append(line)
            if marker in line:
                return "".join(self.output)
        pytest.fail(f"crank up did not get ready; stderr:\n{self.stderr_path.read_text()[-4000:]}")

    def stop(self, sig: signal.Signals) -> int:
        self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=STOP_TIMEOUT_S)
        finally:
            self._stderr.close()
        return code

    def kill_everything(self) -> None:
        """Teardown after a failed test: no process may outlive it."""
        pids = descendants(self.process.pid)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in pids:
            if running(pid):
                os.kill(pid, signal.SIGKILL)
        found = postmaster(self.data_dir / "pgdata")
        if found and running(found[0]):
            os.kill(found[0], signal.SIGQUIT)
        if not self._stderr.closed:
            self._stderr.close()
        self._reader.join(timeout=10)
