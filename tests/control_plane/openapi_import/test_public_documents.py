"""Real public OpenAPI documents (tests/fixtures/openapi/README.md): every operation
an import produces passes write-time validation and compiles.

How long an import takes is measured by bench/openapi_import.py, not here: a time
bound in a test fails on a slow or busy machine while the code is fine."""

from __future__ import annotations

from pathlib import Path

import pytest

from control_plane.openapi_import import (
    ImportOptions,
    ImportResult,
    import_document,
    parse_document,
)
from shared.engine.compiler import compile_operation
from shared.engine.spec_validation import validate_operation
from tests.support.paths import JS_DIR
from tests.support.paths import OPENAPI_FIXTURES as FIXTURES

GITHUB = JS_DIR / "node_modules" / "@octokit" / "openapi" / "generated"
GITHUB_DOCUMENT = GITHUB / "api.github.com.json"

# file -> (version, operations in the document, at least this many imported)
DOCUMENTS = {
    "petstore-swagger-2.0.yaml": ("2.0", 20, 20),
    "petstore-3.0.json": ("3.0", 20, 20),
    "uspto-3.0.yaml": ("3.0", 3, 3),
    "stapi-3.0.json": ("3.0", 120, 120),
    "readme-3.1.yaml": ("3.1", 54, 54),
    "scalar-galaxy-3.1.yaml": ("3.1", 10, 10),
    "schema-circular-3.0.json": ("3.0", 3, 3),
}


def imported(path: Path) -> ImportResult:
    return import_document(parse_document(path.read_bytes()), ImportOptions())


def check_every_operation(result: ImportResult) -> None:
    names = [spec.name for spec in result.operations]
    assert len(names) == len(set(names))
    for spec in result.operations:
        assert validate_operation(spec) == [], spec.name
        compile_operation(spec)
        assert spec.input["type"] == "object"


@pytest.mark.parametrize("name", sorted(DOCUMENTS))
def test_each_fixture_imports_into_valid_operations(name: str) -> None:
    version, total, at_least = DOCUMENTS[name]
    result = imported(FIXTURES / name)
    assert result.info.openapi == version
    assert result.info.operations_total == total
    assert len(result.operations) >= at_least, result.skipped
    check_every_operation(result)


def test_the_swagger_and_openapi_petstores_give_the_same_tools() -> None:
    swagger = imported(FIXTURES / "petstore-swagger-2.0.yaml")
    openapi = imported(FIXTURES / "petstore-3.0.json")
    assert [op.name for op in swagger.operations] == [op.name for op in openapi.operations]
    assert {s.name for s in swagger.secrets} == {
        "swagger_petstore_petstore_auth",
        "swagger_petstore_api_key",
    }


def test_recursive_fixture_schemas_are_cut_and_noted() -> None:
    result = imported(FIXTURES / "schema-circular-3.0.json")
    assert any(note.code == "schema_cut" for note in result.notes)


@pytest.mark.skipif(
    not GITHUB_DOCUMENT.exists(), reason="@octokit/openapi not installed: run tests/js/install.sh"
)
def test_the_github_api_with_over_a_thousand_operations_imports_into_valid_operations() -> None:
    result = imported(GITHUB_DOCUMENT)
    assert result.info.operations_total > 1000
    assert len(result.operations) > 0.95 * result.info.operations_total
    for skipped in result.skipped:  # only what Crank cannot send
        assert "cannot be sent" in skipped.reason, skipped
    check_every_operation(result)
