"""Findings as plain text, grouped by resource: what ``crank lint`` and ``crank apply`` print."""

from __future__ import annotations

from collections.abc import Iterable

from control_plane.lint.findings import Finding


def _heading(resource: str) -> str:
    kind, _, name = resource.partition(":")
    return f"{kind} {name}" if name else kind


def render_findings(findings: Iterable[Finding], indent: str = "") -> list[str]:
    """One heading per resource, in order of appearance; under it each finding's
    severity, rule id, field and message, and its hint on the next line."""
    groups: dict[str, list[Finding]] = {}
    for item in findings:
        groups.setdefault(item.resource, []).append(item)
    lines: list[str] = []
    for resource, items in groups.items():
        lines.append(f"{indent}{_heading(resource)}:")
        for item in items:
            where = f"{item.field}: " if item.field else ""
            lines.append(f"{indent}  {item.severity:<7}  {item.rule}  {where}{item.message}")
            lines.append(f"{indent}           hint: {item.hint}")
    return lines


def summary(findings: list[Finding]) -> str:
    """``2 errors, 1 warning`` or ``no findings``."""
    if not findings:
        return "no findings"
    errors = sum(f.severity == "error" for f in findings)
    warnings = len(findings) - errors
    return f"{errors} error{'s' * (errors != 1)}, {warnings} warning{'s' * (warnings != 1)}"
