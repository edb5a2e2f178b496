"""The venv FastMCP runs in for the side-by-side benchmark: created on first use, then reused.

    .venv/bin/python bench/fastmcp_venv.py [--venv DIR]   # prints the venv's python

FastMCP is a benchmark-only dependency, pinned with hashes in
bench/requirements-fastmcp.lock (its header says why it is not the project's
venv). ``ensure_fastmcp_venv`` makes ``.venv-bench-fastmcp`` at the repository
root with ``python -m venv`` and installs the lock with pip, so a fresh machine
needs nothing but Python and the package index. Like ``./dev``, a stamp file
holding a copy of the installed lock makes later calls a no-op until the lock
changes.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "bench" / "requirements-fastmcp.lock"
DEFAULT_VENV = ROOT / ".venv-bench-fastmcp"
STAMP = ".installed-lock"


def ensure_fastmcp_venv(venv: Path = DEFAULT_VENV, *, quiet: bool = True) -> Path:
    """Create or update the FastMCP venv at ``venv`` and return its python."""
    python = venv / "bin" / "python"
    if not python.exists():
        # The base interpreter, not this venv's: the new venv must not see Crank's packages.
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(venv)], check=True)
    stamp = venv / STAMP
    lock = LOCK.read_bytes()
    if not stamp.exists() or stamp.read_bytes() != lock:
        pip = [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
        if quiet:
            pip.append("--quiet")
        subprocess.run([*pip, "--require-hashes", "-r", str(LOCK)], check=True)
        stamp.write_bytes(lock)
    return python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--venv", type=Path, default=DEFAULT_VENV)
    args = parser.parse_args()
    print(ensure_fastmcp_venv(args.venv, quiet=False))


if __name__ == "__main__":
    main()
