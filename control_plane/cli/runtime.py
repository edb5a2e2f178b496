"""Child processes of ``crank up``: start, wait until they answer, stop every one.

Each child runs in its own session (process group), so a terminal's Ctrl-C
reaches only ``crank up``, which then stops the children in reverse start
order: SIGTERM to the whole group (granian's workers included), a bounded
wait, SIGKILL for whatever is left. On Linux a child also gets SIGTERM if
``crank up`` itself dies without cleaning up (``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

import structlog

log = structlog.get_logger(__name__)

_PR_SET_PDEATHSIG = 1
# Readiness probes go to our own children on loopback: never through a proxy
# from the environment (as in cli/client.py).
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _die_with_parent() -> None:  # pragma: no cover - runs in the forked child
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class ChildFailed(Exception):
    """A child process exited or did not become ready in time."""


@dataclass(slots=True)
class Child:
    name: str
    process: subprocess.Popen[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # pragma: no cover - a member we may not signal still exists
        return True
    return True


class Supervisor:
    """Starts ``crank up``'s children, each in its own process group; ``stop_all`` ends them."""

    def __init__(self) -> None:
        self.children: list[Child] = []

    def start(self, name: str, argv: list[str], env: Mapping[str, str]) -> Child:
        process = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=sys.stderr.fileno(),  # stdout of `crank up` is for the banner only
            start_new_session=True,
            preexec_fn=_die_with_parent,
        )
        child = Child(name, process)
        self.children.append(child)
        log.info("child_started", child=name, pid=process.pid)
        return child

    def exited(self) -> Child | None:
        for child in self.children:
            if child.process.poll() is not None:
                return child
        return None

    def wait_for_http(self, child: Child, url: str, *, timeout_s: float) -> None:
        """Return once ``url`` answers 200; fail when the child exits or time runs out."""
        deadline = time.monotonic() + timeout_s
        while True:
            code = child.process.poll()
            if code is not None:
                raise ChildFailed(f"{child.name} exited with code {code} before it was ready")
            try:
                with _DIRECT.open(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            if time.monotonic() > deadline:
                raise ChildFailed(f"{child.name} did not answer {url} within {timeout_s:.0f} s")
            time.sleep(0.2)

    def watch(self, poll_s: float = 0.5) -> Child:
        """Block until a child exits (signals interrupt this by raising); return it."""
        while True:
            child = self.exited()
            if child is not None:
                return child
            time.sleep(poll_s)

    def stop_all(self, *, timeout_s: float = 10.0) -> None:
        for child in reversed(self.children):
            _stop_group(child, timeout_s)
        self.children.clear()


def _stop_group(child: Child, timeout_s: float) -> None:
    pgid = child.pid  # start_new_session: the child leads its own group
    if _group_alive(pgid):
        log.info("child_stopping", child=child.name, pid=child.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        child.process.poll()  # reap the leader so the group can empty
        if not _group_alive(pgid):
            break
        time.sleep(0.1)
    else:
        log.warning("child_killed", child=child.name, pid=child.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
    child.process.wait()
