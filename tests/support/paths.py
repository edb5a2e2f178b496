"""Where the files the tests read live, wherever the test module sits."""

from __future__ import annotations

from pathlib import Path

TESTS_DIR = Path(__file__).resolve().parent.parent
REPOSITORY_DIR = TESTS_DIR.parent
DOCS_DIR = REPOSITORY_DIR / "docs"
OPENAPI_FIXTURES = TESTS_DIR / "fixtures" / "openapi"
# The npm packages of tests/js/package-lock.json (tests/js/install.sh installs them).
JS_DIR = TESTS_DIR / "js"
