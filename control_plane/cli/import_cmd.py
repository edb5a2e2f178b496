"""``crank import-openapi SPEC --workspace W``: draft operations from an OpenAPI document.

SPEC is a file (JSON or YAML; ``-`` reads stdin), sent as text, or an
``http(s)://`` URL, which the control plane fetches itself through its SSRF
guard (so a URL the gateway could not call cannot be imported either). The
import writes drafts only and prints the report: what was created, updated,
left unchanged, left alone because it was edited since the last import (with
the diff), skipped and why, the secrets to set, the notes and the linter's
findings.

Exit codes:

- 0 — imported (skipped operations and lint findings are reported, not failures);
- 1 — conflicts remain (drafts edited since the last import were left as they
  are; ``--overwrite`` replaces them), or the request was refused by
  validation (a bad agent slug);
- 2 — usage or connection problems: no such file, a document that is not
  OpenAPI, a URL the guard refuses, no token, the control plane unreachable.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from typing import Any

import msgspec

from control_plane.cli.apply_cmd import read_source
from control_plane.cli.client import Client, segment
from control_plane.cli.common import CliError
from control_plane.services.imports import ImportConflict, ImportReport

EXIT_OK = 0
EXIT_CONFLICTS = 1
MAX_LISTED = 20  # names per line group before "... and N more"
MAX_DIFF_LINES = 12


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    more = len(names) - MAX_LISTED
    return f"{shown}, ... and {more} more" if more > 0 else shown


def _value(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 70 else text[:67] + "..."


def _conflict_lines(conflict: ImportConflict) -> list[str]:
    why = (
        "edited since the last import"
        if conflict.reason == "edited_since_import"
        else "not created by an import"
    )
    lines = [f"  {conflict.name}: {why}; the document would change:"]
    symbol = {"added": "+", "removed": "-", "changed": "~"}
    for change in conflict.changes[:MAX_DIFF_LINES]:
        if change.kind == "changed":
            detail = f"{_value(change.before)} -> {_value(change.after)}"
        else:
            detail = _value(change.after if change.kind == "added" else change.before)
        lines.append(f"    {symbol[change.kind]} {change.path or '(all)'}: {detail}")
    hidden = len(conflict.changes) - MAX_DIFF_LINES + conflict.more_changes
    if hidden > 0:
        lines.append(f"    ... and {hidden} more changes")
    return lines


# What became of the agent's draft, after "would be " on a dry run.
_AGENT_DONE = {
    "create": "created as a draft",
    "update": "updated as a draft",
    "unchanged": "unchanged",
}


def render_report(report: ImportReport) -> list[str]:
    source = report.source
    kind = "Swagger 2.0" if source.openapi == "2.0" else f"OpenAPI {source.openapi}"
    lines = [
        f"{source.title} {source.version} ({kind}): {source.operations_total} operations"
        + (f", {source.filtered_out} filtered out" if source.filtered_out else ""),
    ]
    heading = f"workspace {report.workspace}"
    if report.dry_run:
        heading += " (dry run: nothing was written)"
    lines.append(f"{heading}:")
    verb = "would be " if report.dry_run else ""
    for label, names in (
        ("created", report.created),
        ("updated", report.updated),
        ("unchanged", report.unchanged),
    ):
        if names:
            lines.append(f"  {verb}{label} ({len(names)}): {_names(names)}")
    if not (report.created or report.updated or report.unchanged):
        lines.append("  no operations imported")
    if report.conflicts:
        lines.append(
            f"conflicts ({len(report.conflicts)}), left as they are (--overwrite replaces them):"
        )
        for conflict in report.conflicts:
            lines += _conflict_lines(conflict)
    if report.skipped:
        lines.append(f"skipped ({len(report.skipped)}):")
        lines += [f"  {s.where}: {s.reason}" for s in report.skipped]
    if report.secrets:
        lines.append("secrets to set (the operations' request.auth names them):")
        for secret in report.secrets:
            lines.append(
                f"  crank secrets set --workspace {report.workspace} {secret.name}"
                f"   # {secret.kind}: {secret.description}; {secret.operations} operations"
            )
    if report.agent is not None:
        agent = report.agent
        added = f", {len(agent.added)} operations bound" if agent.added else ""
        done = _AGENT_DONE[agent.action]
        lines.append(f"agent {agent.slug}: {verb}{done}{added}")
    if report.notes:
        by_code: dict[str, list[str]] = defaultdict(list)
        messages: dict[str, str] = {}
        for note in report.notes:
            by_code[note.code].append(note.operation)
            messages.setdefault(note.code, note.message)
        lines.append("notes:")
        for code, operations in by_code.items():
            unique = list(dict.fromkeys(operations))
            lines.append(f"  {code} ({len(unique)}): {_names(unique)}")
            lines.append(f"    e.g. {messages[code]}")
    if report.findings:
        errors = sum(f.severity == "error" for f in report.findings)
        lines.append(
            f"lint: {errors} errors, {len(report.findings) - errors} warnings "
            "(errors block publishing; crank lint shows them all):"
        )
        by_rule: dict[str, list[str]] = defaultdict(list)
        severity: dict[str, str] = {}
        for finding in report.findings:
            by_rule[finding.rule].append(finding.resource.partition(":")[2])
            severity[finding.rule] = finding.severity
        for rule, resources in by_rule.items():
            unique = list(dict.fromkeys(resources))
            lines.append(f"  {severity[rule]} {rule} ({len(unique)}): {_names(unique)}")
    lines.append("nothing was published; review the drafts, then publish them")
    return lines


def _body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {
        "include": args.include,
        "exclude": args.exclude,
        "agent": args.agent,
        "base_url": args.base_url,
        "name_prefix": args.prefix,
        "dry_run": args.dry_run,
        "overwrite": args.overwrite,
    }
    if args.spec.startswith(("http://", "https://")):
        body["url"] = args.spec
    else:
        text, _name = read_source(args.spec)
        body["document"] = text
    return body


def run(args: argparse.Namespace) -> int:
    body = _body(args)
    client = Client.from_env()
    answer = client.post(f"/workspaces/{segment(args.workspace)}/import/openapi", body)
    try:
        report = msgspec.convert(answer, ImportReport)
    except msgspec.ValidationError as exc:
        raise CliError(f"the control plane answered with an unexpected report: {exc}") from None
    print("\n".join(render_report(report)), flush=True)
    return EXIT_CONFLICTS if report.conflicts else EXIT_OK


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "import-openapi",
        help="draft operations from an OpenAPI 3.x or Swagger 2.0 document",
        description=(
            "Import the operations of an OpenAPI 3.0/3.1 or Swagger 2.0 document (a file, - for "
            "stdin, or an http(s) URL) into draft operations of a workspace; never publishes. "
            "Drafts edited since the last import are left alone and shown as a diff. "
            "Exit codes: 0 imported, 1 conflicts remain or the request was refused, "
            "2 usage, document or connection errors."
        ),
    )
    parser.add_argument("spec", metavar="SPEC", help="a JSON/YAML file, - for stdin, or a URL")
    parser.add_argument("--workspace", required=True, metavar="W", help="target workspace")
    parser.add_argument("--agent", metavar="A", help="bind the imported operations to agent A")
    parser.add_argument(
        "--include",
        action="append",
        default=[],
        metavar="FILTER",
        help="tag:NAME, path:GLOB, operation:GLOB or a bare glob; repeatable",
    )
    parser.add_argument(
        "--exclude", action="append", default=[], metavar="FILTER", help="as --include"
    )
    parser.add_argument(
        "--base-url", metavar="URL", help="upstream base URL instead of the document's servers"
    )
    parser.add_argument("--prefix", default="", metavar="P", help="prefix for every tool name")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the report without writing anything"
    )
    parser.add_argument(
        "--overwrite", action="store_true", help="also replace drafts edited since the last import"
    )
    parser.set_defaults(func=run)
