"""How long OpenAPI import takes, against parsing the same document, in one run.

    .venv/bin/python bench/openapi_import.py [--rounds 3] [FILE ...]

Default documents: the fixtures of tests/fixtures/openapi and, when
tests/js/install.sh has installed it, GitHub's REST API (@octokit/openapi,
over a thousand operations). For each document it prints the best of
``--rounds`` runs of ``parse_document`` alone (the baseline: reading the JSON
or YAML) and of ``parse_document`` + ``import_document`` (what
``crank import-openapi`` and the import route do), and their ratio. The
tests check what an import produces; its speed is measured here, where a
slow or busy machine cannot fail a build.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from control_plane.openapi_import import (  # noqa: E402 - after the path set-up
    ImportOptions,
    import_document,
    parse_document,
)

FIXTURES = ROOT / "tests" / "fixtures" / "openapi"
GITHUB = ROOT / "tests" / "js" / "node_modules" / "@octokit" / "openapi" / "generated"


def best_of(rounds: int, run: Callable[[], object]) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("files", nargs="*", type=Path)
    args = parser.parse_args()
    files = args.files or sorted(FIXTURES.glob("*.json")) + sorted(FIXTURES.glob("*.yaml"))
    if not args.files and (GITHUB / "api.github.com.json").exists():
        files.append(GITHUB / "api.github.com.json")
    print(f"{'document':34} {'ops':>5} {'parse s':>8} {'import s':>9} {'ratio':>6}")
    for path in files:
        raw = path.read_bytes()
        parse_s = best_of(args.rounds, lambda raw=raw: parse_document(raw))
        result = import_document(parse_document(raw), ImportOptions())
        total_s = best_of(
            args.rounds, lambda raw=raw: import_document(parse_document(raw), ImportOptions())
        )
        print(
            f"{path.name:34} {len(result.operations):>5} {parse_s:>8.3f} {total_s:>9.3f}"
            f" {total_s / parse_s:>6.1f}"
        )


if __name__ == "__main__":
    main()
