"""``crank lint FILE [--format text|json]``: the tool linter, locally, no server needed.

The file is the one ``crank apply`` takes (YAML, or JSON for ``*.json``;
``-`` reads stdin). What is reported: the write-time validation errors
(``spec-invalid``) and every lint finding, grouped by resource. Agents are
linted against the file's operations only; ``POST .../lint`` on the control
plane also looks up the operations they bind from the workspace.

Exit codes: 0 no errors (warnings allowed); 1 errors, i.e. the file would be
refused by ``crank apply`` or a publish; 2 usage or parse errors (no such
file, unparsable YAML or JSON).
"""

from __future__ import annotations

import argparse

import msgspec

from control_plane.cli.apply_cmd import decode_file, parse_document, read_source
from control_plane.lint import Finding, check_and_lint_file, has_errors
from control_plane.lint.findings import finding
from control_plane.lint.report import render_findings, summary
from control_plane.services.apply import check_file
from shared.engine.spec import CrankFile
from shared.engine.spec_validation import decode_error_to_field

EXIT_OK = 0
EXIT_ERRORS = 1

_encoder = msgspec.json.Encoder()


class _Report(msgspec.Struct, kw_only=True):
    findings: list[Finding]


def run(args: argparse.Namespace) -> int:
    text, name = read_source(args.file)
    document = parse_document(text, name)
    try:
        file = decode_file(document)
    except msgspec.ValidationError as exc:
        error = decode_error_to_field(exc, CrankFile)
        findings = [finding("spec-invalid", "file", error.field or None, error.message)]
    else:
        findings = check_and_lint_file(file, check_file(file))
    if args.format == "json":
        print(_encoder.encode(_Report(findings=findings)).decode(), flush=True)
    else:
        print("\n".join([*render_findings(findings), f"{name}: {summary(findings)}"]), flush=True)
    return EXIT_ERRORS if has_errors(findings) else EXIT_OK


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "lint",
        help="check an operation file against the tool-design rules (no server needed)",
        description=(
            "Lint the operations and agents of FILE: the write-time checks and the tool-design "
            "rules (docs/lint.md). Exit codes: 0 no errors (warnings allowed), 1 errors, "
            "2 usage or parse errors."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="YAML or JSON; - is stdin")
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default text)"
    )
    parser.set_defaults(func=run)
