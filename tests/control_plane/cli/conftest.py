"""The ``crank up`` fixtures: a short data directory, and ``crank up`` processes on it
that are killed with everything they started when the test ends."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.crank_up import CrankUp
from tests.support.processes import free_port


@pytest.fixture
def crank_data_dir() -> Iterator[Path]:
    """A short path (the embedded server's Unix socket lives in it) outside pytest's
    basetemp, which a concurrent pytest run on the same machine may rotate away."""
    path = Path(tempfile.mkdtemp(prefix="crank-up-"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def start_crank_up(crank_data_dir: Path) -> Iterator[Any]:
    data_dir = crank_data_dir / "data"
    ports = {"control_plane": free_port(), "gateway": free_port(), "sales": free_port()}
    started: list[CrankUp] = []

    def start(extra_env: dict[str, str] | None = None) -> CrankUp:
        crank_up = CrankUp(data_dir, ports, extra_env)
        started.append(crank_up)
        return crank_up

    yield start
    for crank_up in started:
        crank_up.kill_everything()
