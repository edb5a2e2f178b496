"""The test tree's own rules: test modules share helpers only through
tests/support (or a conftest.py's fixtures), never by importing another test
module or a conftest.py, and every folder of Python files is a package."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.support.paths import TESTS_DIR


def _python_files() -> list[Path]:
    return sorted(p for p in TESTS_DIR.rglob("*.py") if "node_modules" not in p.parts)


def _package_of(path: Path) -> list[str]:
    """The dotted package a file under tests/ belongs to, as parts."""
    return list(path.relative_to(TESTS_DIR.parent).parent.parts)


def _imports(source: str, package: list[str]) -> set[str]:
    """Every module ``source`` imports, relative imports resolved; for
    ``from package import name`` also ``package.name``, which may be a module."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _is_test_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "tests" and (parts[-1].startswith("test_") or parts[-1] == "conftest")


def test_no_module_under_tests_imports_a_test_module_or_a_conftest() -> None:
    offending = {}
    for path in _python_files():
        imported = _imports(path.read_text(), _package_of(path))
        if bad := sorted(filter(_is_test_module, imported)):
            offending[str(path.relative_to(TESTS_DIR.parent))] = bad
    assert offending == {}, "move what they share to tests/support or to a conftest.py fixture"


def test_every_folder_with_python_files_is_a_package() -> None:
    folders = {path.parent for path in _python_files()}
    missing = [
        str(f.relative_to(TESTS_DIR.parent)) for f in folders if not (f / "__init__.py").exists()
    ]
    assert sorted(missing) == []


@pytest.mark.parametrize(
    ("source", "forbidden"),
    [
        ("from tests.gateway.transport.test_legacy import INIT", True),
        ("import tests.control_plane.cli.test_client", True),
        ("from tests import conftest", True),
        ("from tests.conftest import TEST_SECRET_KEY", True),
        ("from . import test_modern", True),
        ("from ..pipeline.test_tools_call import seed", True),
        ("from .conftest import shop", True),
        ("from tests.support.mcp import bearer", False),
        ("from ..support import mcp", False),
        ("import pytest", False),
    ],
)
def test_the_rule_finds_every_form_of_a_test_module_import(source: str, forbidden: bool) -> None:
    """As if written in tests/gateway/transport/: absolute, relative and conftest imports."""
    imported = _imports(source, ["tests", "gateway", "transport"])
    assert any(map(_is_test_module, imported)) is forbidden, imported
