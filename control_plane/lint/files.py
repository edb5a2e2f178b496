"""Linting a whole operation file: its operations, then its agents against them.

What ``crank lint``, the lint API and ``crank apply`` run on a file; findings
name resources (``operation:NAME``), and ``file_paths`` maps them back to
paths in the file.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

from control_plane.lint.agent_rules import lint_agent
from control_plane.lint.findings import Finding, agent_resource, finding, operation_resource
from control_plane.lint.operation_rules import lint_operation
from shared.engine.spec import CrankFile, OperationSpec
from shared.engine.spec_validation import FieldError


def lint_file(
    file: CrankFile, workspace_operations: Mapping[str, OperationSpec] | None = None
) -> list[Finding]:
    """Findings of every operation and agent in ``file``, in file order.

    An agent's tools are the file's operations; ``workspace_operations``
    supplies the specs of operations it binds that are not in the file.
    """
    findings: list[Finding] = []
    for operation in file.operations:
        findings += lint_operation(operation)
    known = {**(workspace_operations or {}), **{op.name: op for op in file.operations}}
    for agent in file.agents:
        findings += lint_agent(agent, known)
    return findings


_FILE_PATH: Final = re.compile(r"(operations|agents)\[(\d+)\](?:\.(.*))?")


def _resource_of(file: CrankFile, path: str) -> tuple[str, str | None]:
    """``operations[2].request.url`` -> (``operation:NAME``, ``request.url``)."""
    match = _FILE_PATH.fullmatch(path)
    if match is None:
        return "file", path or None
    section, index, rest = match.group(1), int(match.group(2)), match.group(3)
    if section == "operations" and index < len(file.operations):
        return operation_resource(file.operations[index].name), rest
    if section == "agents" and index < len(file.agents):
        return agent_resource(file.agents[index].slug), rest
    return "file", path


def check_and_lint_file(
    file: CrankFile,
    invalid: list[FieldError],
    workspace_operations: Mapping[str, OperationSpec] | None = None,
) -> list[Finding]:
    """``lint_file`` plus the file's validation errors as ``spec-invalid`` findings.

    ``invalid`` is what ``services.apply.check_file`` says, with paths into
    the file. What ``crank lint`` and the lint API report: one list that says
    whether the file would apply and publish. A validation error on a field
    that a lint error already names is left out, so nothing is said twice.
    """
    findings = lint_file(file, workspace_operations)
    flagged = {(f.resource, f.field) for f in findings if f.severity == "error"}
    errors: list[Finding] = []
    for error in invalid:
        resource, field = _resource_of(file, error.field)
        if (resource, field) not in flagged:
            errors.append(finding("spec-invalid", resource, field, error.message))
    return errors + findings


def file_paths(file: CrankFile) -> dict[str, str]:
    """resource -> its path in the file: ``operation:get_order`` -> ``operations[0]``."""
    paths = {
        operation_resource(op.name): f"operations[{i}]" for i, op in enumerate(file.operations)
    }
    paths |= {agent_resource(agent.slug): f"agents[{i}]" for i, agent in enumerate(file.agents)}
    return paths
