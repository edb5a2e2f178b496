"""The tool linter: tool-design.md's checklist as rules with ids and severities.

Style, not validity: ``shared.engine.spec_validation`` refuses what cannot be saved;
this package judges what can. ``crank lint``, the lint API, ``crank apply``
and every publish run it; errors block a publish, warnings are reported.
The rule table is in ``findings``, the rules in ``operation_rules`` and
``agent_rules``, a whole file in ``files``; docs/lint.md documents every rule.
This module only re-exports: no submodule imports from it.
"""

from __future__ import annotations

from control_plane.lint.agent_rules import lint_agent
from control_plane.lint.files import check_and_lint_file, file_paths, lint_file
from control_plane.lint.findings import (
    RULES,
    Finding,
    agent_resource,
    has_errors,
    to_field_errors,
)
from control_plane.lint.operation_rules import lint_operation

__all__ = [
    "RULES",
    "Finding",
    "agent_resource",
    "check_and_lint_file",
    "file_paths",
    "has_errors",
    "lint_agent",
    "lint_file",
    "lint_operation",
    "to_field_errors",
]
