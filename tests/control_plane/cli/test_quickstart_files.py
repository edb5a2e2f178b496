"""The quickstart's example file, linted as a newcomer lints it: the quickstart shows
`crank apply` printing no warning, so the file must have none (issue #27)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from tests.support.cli import clean_env
from tests.support.paths import DOCS_DIR


def quickstart_file(name: str) -> str:
    """The YAML block after "Save this as `NAME`" in docs/quickstart.md."""
    text = (DOCS_DIR / "quickstart.md").read_text(encoding="utf-8")
    found = re.search(rf"Save this as `{re.escape(name)}`.*?```yaml\n(.*?)```", text, re.S)
    assert found is not None, f"no {name} in the quickstart"
    return found[1]


def test_the_quickstarts_currencies_file_has_no_lint_findings(tmp_path: Path) -> None:
    path = tmp_path / "currencies.yaml"
    path.write_text(quickstart_file("currencies.yaml"), encoding="utf-8")

    linted = subprocess.run(
        [sys.executable, "-m", "control_plane.cli", "lint", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=clean_env(CRANK_DATA_DIR=str(tmp_path)),
    )

    assert linted.returncode == 0, linted.stderr
    assert linted.stdout.strip() == f"{path}: no findings"
