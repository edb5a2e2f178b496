"""``crank apply -f FILE [--publish] [--dry-run] [--workspace W]``: what CI pipelines run.

The file (YAML, or JSON for ``*.json``; ``-`` reads stdin) is decoded here
first, so a typo is reported with its path before anything is sent; the
control plane then validates and lints everything, applies the file in one
transaction and answers with the plan, printed as a table with the linter's
warnings under it, per resource. Lint errors refuse the whole file and are
printed the same way. Applying the same file again changes nothing and
prints "no changes". An agent's ``webhooks`` that the apply created are
printed with their signing secrets, once (docs/operation-file.md, "Webhooks").

The target workspace is ``--workspace``, else the file's ``workspace``, else
``default``. A file without ``workspace`` goes wherever ``--workspace`` says;
a file that names a workspace — ``default`` included — and a different
``--workspace`` is refused, as the server refuses a file naming another
workspace than its URL.

Exit codes:

- 0 — applied, or nothing to change (also a dry run that found changes);
- 1 — the file has errors (syntax-valid but unknown fields, wrong types,
  lint/validation errors, bindings to missing operations): nothing was written;
- 2 — usage or connection problems: no such file, unparsable YAML/JSON, no
  token, the control plane unreachable or refusing the token or workspace.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import yaml

from control_plane.cli.client import ApiError, Client, segment
from control_plane.cli.common import CliError
from control_plane.cli.yaml_load import safe_load
from control_plane.lint import Finding
from control_plane.lint.report import render_findings, summary
from control_plane.services.apply_plan import ApplyPlan, PlanItem
from shared.engine.spec import CrankFile
from shared.engine.spec_validation import FieldError, decode_error_to_field

DEFAULT_WORKSPACE = "default"  # where a file that names none goes without --workspace

# A whole file is checked, linted and written in one request; a large one on a slow
# machine takes longer than the client's default wait (docs/cli.md, "crank apply").
APPLY_TIMEOUT_S = 600.0

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_USAGE = 2

_RESOURCE = re.compile(r"^(operations|agents)\[(\d+)\]")


def read_source(path: str) -> tuple[str, str]:
    """(text, display name); ``-`` is stdin."""
    if path == "-":
        return sys.stdin.read(), "<stdin>"
    try:
        return Path(path).read_text(encoding="utf-8"), path
    except FileNotFoundError:
        raise CliError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"{path}: cannot read it: {exc}") from None


def parse_document(text: str, name: str) -> Any:
    """The document as plain data; a syntax error names its line (exit 2)."""
    if name.endswith(".json"):
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise CliError(f"{name}:{exc.lineno}:{exc.colno}: not valid JSON: {exc.msg}") from None
    try:
        return safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{name}:{mark.line + 1}:{mark.column + 1}" if mark else name
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise CliError(f"{where}: not valid YAML: {problem}") from None
    except yaml.YAMLError as exc:
        raise CliError(f"{name}: not valid YAML: {exc}") from None


def names_of(document: Any) -> dict[str, list[Any]]:
    """The names of the document's operations and slugs of its agents, by position:
    all that error labels need, so the document itself can be let go."""
    names: dict[str, list[Any]] = {}
    for section, key in (("operations", "name"), ("agents", "slug")):
        entries = document.get(section) if isinstance(document, dict) else None
        if isinstance(entries, list):
            names[section] = [e.get(key) if isinstance(e, dict) else None for e in entries]
    return names


def file_names(file: CrankFile) -> dict[str, list[Any]]:
    return {
        "operations": [op.name for op in file.operations],
        "agents": [agent.slug for agent in file.agents],
    }


def label(field: str, names: dict[str, list[Any]]) -> str:
    """``operations[1].request`` -> ``operations[1] (delete_order).request``."""
    match = _RESOURCE.match(field)
    if not match:
        return field or "(file)"
    entries = names.get(match.group(1), [])
    index = int(match.group(2))
    name = entries[index] if index < len(entries) else None
    if not isinstance(name, str):
        return field
    return f"{match.group(0)} ({name}){field[match.end() :]}"


def print_errors(name: str, errors: list[FieldError], names: dict[str, list[Any]]) -> None:
    plural = "s" if len(errors) != 1 else ""
    print(f"{name}: {len(errors)} error{plural}; nothing was applied", file=sys.stderr)
    for error in errors:
        print(f"  {label(error.field, names)}: {error.message}", file=sys.stderr)


def print_lint_errors(name: str, findings: list[Finding]) -> None:
    print(f"{name}: {summary(findings)}; nothing was applied", file=sys.stderr)
    for line in render_findings(findings, indent="  "):
        print(line, file=sys.stderr)


def decode_file(document: Any) -> CrankFile:
    """A parsed YAML/JSON document as a ``CrankFile``; raises msgspec.ValidationError."""
    if document is None:
        raise msgspec.ValidationError("the file is empty")
    return msgspec.convert(document, CrankFile)


def _action(item: PlanItem) -> str:
    if item.action == "unchanged":
        return "publish" if item.publish else "unchanged"
    return f"{item.action} + publish" if item.publish else item.action


def render_plan(plan: ApplyPlan) -> list[str]:
    heading = f"workspace {plan.workspace}" + (
        " (dry run: nothing was written)" if plan.dry_run else ""
    )
    if not plan.items:
        return [f"{heading}: the file holds no operations or agents; no changes"]
    rows = [("KIND", "NAME", "ACTION", "VERSION")]
    for item in plan.items:
        version = f"v{item.version}" if item.version is not None else "-"
        rows.append((item.kind, item.name, _action(item), version))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines = [f"{heading}:"]
    for row in rows:
        cells = [cell.ljust(widths[i]) for i, cell in enumerate(row[:3])]
        lines.append("  " + "  ".join([*cells, row[3]]).rstrip())
    lines += _webhook_lines(plan)
    warnings = [(item, w) for item in plan.items for w in item.warnings]
    if warnings:
        lines.append("warnings:")
        lines += [f"  {item.kind} {item.name}: {w.message} [{w.code}]" for item, w in warnings]
    if plan.findings:
        lines.append(f"lint: {summary(plan.findings)}")
        lines += render_findings(plan.findings, indent="  ")
    if not plan.changed:
        lines.append(f"no changes: all {len(plan.items)} resources already match the file")
        return lines
    counts = Counter(item.action for item in plan.items)
    published = sum(item.publish for item in plan.items)
    done = (
        f"would create {counts['create']}, update {counts['update']}, publish {published}"
        if plan.dry_run
        else f"created {counts['create']}, updated {counts['update']}, published {published}"
    )
    hooks = sum(len(item.webhooks) for item in plan.items)
    if hooks:
        done += f", {hooks} webhook{'s' if hooks != 1 else ''} changed"
    lines.append(f"{done}; {counts['unchanged']} unchanged")
    return lines


def _webhook_lines(plan: ApplyPlan) -> list[str]:
    """Subscriptions created or revoked; a created one's signing secret, this once."""
    changes = [(item.name, change) for item in plan.items for change in item.webhooks]
    if not changes:
        return []
    lines = ["webhooks:"]
    for agent, change in changes:
        if plan.dry_run:
            done = f"would {change.action}"
        else:
            done = "created" if change.action == "create" else "revoked"
        lines.append(f"  agent {agent}: {done} {change.id} {change.url} ({change.format})")
        if change.secret is not None:
            lines.append(f"    signing secret (shown once, store it now): {change.secret}")
    return lines


def load_file(path: str) -> tuple[CrankFile, str]:
    """(the file, its display name); the text and the parsed document are let go as
    soon as the next form exists (a large file's copies would add up: docs/performance.md)."""
    text, name = read_source(path)
    document = parse_document(text, name)
    del text
    try:
        return decode_file(document), name
    except msgspec.ValidationError as exc:
        print_errors(name, [decode_error_to_field(exc, CrankFile)], names_of(document))
        raise _Invalid from None


class _Invalid(Exception):
    """The file has errors, already printed."""


def run(args: argparse.Namespace) -> int:
    try:
        file, name = load_file(args.file)
    except _Invalid:
        return EXIT_INVALID
    if args.workspace and file.workspace not in (None, args.workspace):
        raise CliError(
            f"{name} is for workspace {file.workspace!r} but --workspace is {args.workspace!r}"
        )
    workspace = args.workspace or file.workspace or DEFAULT_WORKSPACE
    file = msgspec.structs.replace(file, workspace=workspace)

    client = Client.from_env(timeout=APPLY_TIMEOUT_S)
    query = {"publish": str(args.publish).lower(), "dry_run": str(args.dry_run).lower()}
    try:
        body = client.post(f"/workspaces/{segment(workspace)}/apply", file, query)
    except ApiError as exc:
        if exc.code == "lint_failed" and exc.findings:
            print_lint_errors(name, exc.findings)
            return EXIT_INVALID
        if exc.code != "validation_failed" or not exc.errors:
            raise
        print_errors(name, exc.errors, file_names(file))
        return EXIT_INVALID
    try:
        plan = msgspec.convert(body, ApplyPlan)
    except msgspec.ValidationError as exc:
        raise CliError(f"the control plane answered with an unexpected plan: {exc}") from None
    print("\n".join(render_plan(plan)), flush=True)
    return EXIT_OK


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "apply",
        help="apply an operation file (idempotent; prints the plan)",
        description=(
            "Create or update the operations and agents of FILE in a workspace, and with "
            "--publish publish what changed. A second apply of the same file changes nothing. "
            "Exit codes: 0 applied or no changes, 1 errors in the file, lint errors included "
            "(nothing applied), 2 usage or connection errors."
        ),
    )
    parser.add_argument(
        "-f", "--file", required=True, metavar="FILE", help="YAML or JSON; - is stdin"
    )
    parser.add_argument("--publish", action="store_true", help="publish what changed")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the plan without writing anything"
    )
    parser.add_argument(
        "--workspace", metavar="W", help="target workspace (default: the file's, else default)"
    )
    parser.set_defaults(func=run)
