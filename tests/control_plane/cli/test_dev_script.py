"""``./dev up`` as a newcomer runs it: its install step says what it does (issue #27:
the first run was silent for about a minute). The venv is a stand-in whose python
records the pip commands, so no package index is needed; the script is the real one."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.support.paths import REPOSITORY_DIR

RECORDING_PYTHON = """#!/bin/sh
echo "python $*" >> "$(dirname "$0")/../calls"
"""
FAKE_CRANK = """#!/bin/sh
echo "crank $*" >> "$(dirname "$0")/../calls"
"""


def _checkout(tmp_path: Path) -> Path:
    """A copy of the script next to a lock file and a pyproject, with a stand-in venv."""
    root = tmp_path / "repo"
    root.mkdir()
    shutil.copy2(REPOSITORY_DIR / "dev", root / "dev")
    (root / "requirements-dev.lock").write_text("crank-test-pin==1 --hash=sha256:00\\n")
    (root / "pyproject.toml").write_text("[project]\\nname = 'x'\\n")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name, text in (("python", RECORDING_PYTHON), ("crank", FAKE_CRANK)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    return root


def _dev_up(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(root / "dev"), "up"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={"PATH": os.environ["PATH"], "HOME": str(root)},
    )


def test_dev_up_says_it_installs_before_it_does_and_then_starts_crank_up(tmp_path: Path) -> None:
    root = _checkout(tmp_path)

    first = _dev_up(root)

    assert first.returncode == 0, first.stderr
    said = first.stderr.splitlines()
    assert said[0].startswith(
        "./dev: installing the pinned dependencies of requirements-dev.lock into .venv"
    )
    assert "about a minute" in said[0]
    assert said[-1] == "./dev: dependencies installed"
    calls = (root / ".venv" / "calls").read_text().splitlines()
    assert calls[-1] == "crank up"
    assert any("--require-hashes -r requirements-dev.lock" in call for call in calls)

    again = _dev_up(root)  # installed: nothing to say, straight to crank up

    assert again.returncode == 0, again.stderr
    assert again.stderr == ""
    assert (root / ".venv" / "calls").read_text().splitlines()[len(calls) :] == ["crank up"]
