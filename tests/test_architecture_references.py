"""Code comments cite docs/architecture.md by section; every cited section exists."""

from __future__ import annotations

import re

from tests.support.paths import DOCS_DIR, REPOSITORY_DIR

SOURCE_PACKAGES = ("control_plane", "mcp_gateway", "shared", "bench", "tests")
# "docs/architecture.md, "Section"", possibly broken over a comment's lines.
SELF = "test_architecture_references.py"
CITATION = re.compile(r'docs/architecture\.md,\s*(?:#\s*)?"([^"]+)"')


def sections() -> set[str]:
    text = (DOCS_DIR / "architecture.md").read_text()
    return {m.group(1).strip() for m in re.finditer(r"^#{2,3} (.+)$", text, re.MULTILINE)}


def citations() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for package in SOURCE_PACKAGES:
        for path in (REPOSITORY_DIR / package).rglob("*.py"):
            if path.name == SELF:
                continue
            for match in CITATION.finditer(path.read_text()):
                name = " ".join(match.group(1).split())
                found.setdefault(name, []).append(str(path.relative_to(REPOSITORY_DIR)))
    return found


def test_every_cited_architecture_section_exists() -> None:
    known = sections()
    cited = citations()
    assert cited, "no citation found: the pattern no longer matches the comments"
    missing = {name: places for name, places in cited.items() if name not in known}
    assert missing == {}


def test_no_comment_cites_documents_outside_the_repository() -> None:
    outside = re.compile(r'\b(?:DESIGN|STYLE)\s*(?:"|\'s\b|:)|\.\./shared/')
    offenders = [
        str(path.relative_to(REPOSITORY_DIR))
        for package in SOURCE_PACKAGES
        for path in (REPOSITORY_DIR / package).rglob("*.py")
        if path.name != SELF and outside.search(path.read_text())
    ]
    assert offenders == []


def _source_map() -> str:
    text = (DOCS_DIR / "architecture.md").read_text()
    start = text.index("## Source map")
    return text[start : text.index("\n## ", start + 1)]


def test_every_gateway_and_shared_module_is_in_the_source_map() -> None:
    """Each module's file name appears in the map (a package's name for its ``__init__``)."""
    words = set(re.findall(r"[\w.]+", _source_map()))
    missing = [
        str(path.relative_to(REPOSITORY_DIR))
        for package in ("mcp_gateway", "shared")
        for path in sorted((REPOSITORY_DIR / package).rglob("*.py"))
        if path.name not in ("__init__.py", "__main__.py")
        and path.name not in words
        and f"{path.parent.name}/{path.name}" not in _source_map()
    ]
    assert missing == []
