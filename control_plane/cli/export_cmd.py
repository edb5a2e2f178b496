"""``crank export [--workspace W] [-o FILE] [--published] [--format yaml|json] [--no-workspace]``.

Writes a workspace's operations and agents as an operation file, the format
``crank apply`` takes, so that ``crank export`` then ``crank apply`` into an
empty workspace reproduces it (control_plane.services.export says what is in
the file and what is not). Drafts by default; ``--published`` exports what the
gateways serve. The file names its workspace; ``--no-workspace`` leaves that
out, for a file meant for ``crank apply --workspace`` into several.

The control plane answers JSON; the YAML is rendered here with the server's
own renderer, so both give the same bytes. Output goes to stdout, or to
``-o FILE`` (its suffix ``.json`` picks JSON unless ``--format`` says).

Exit codes: 0 written; 2 usage or connection errors (no token, the control
plane unreachable, an unknown workspace, a file that cannot be written).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import msgspec

from control_plane.cli.client import Client, segment
from control_plane.cli.common import CliError
from control_plane.services.export import ExportFormat, render, to_document
from shared.engine.spec import CrankFile


def _format(args: argparse.Namespace) -> ExportFormat:
    if args.format:
        return "json" if args.format == "json" else "yaml"
    return "json" if args.output and args.output.endswith(".json") else "yaml"


def run(args: argparse.Namespace) -> int:
    query = {"format": "json", "published": str(args.published).lower()}
    body = Client.from_env().get(f"/workspaces/{segment(args.workspace)}/export", query)
    try:
        file = msgspec.convert(body, CrankFile)
    except msgspec.ValidationError as exc:
        raise CliError(f"the control plane answered with an unexpected file: {exc}") from None
    output = render(to_document(file, with_workspace=not args.no_workspace), _format(args))
    if not args.output or args.output == "-":
        sys.stdout.buffer.write(output)
        sys.stdout.flush()
        return 0
    try:
        Path(args.output).write_bytes(output)
    except OSError as exc:
        raise CliError(f"{args.output}: cannot write it: {exc}") from None
    view = "published state" if args.published else "drafts"
    providers = len(file.identity_providers)
    print(
        f"wrote {len(file.operations)} operations and {len(file.agents)} agents "
        + (f"and {providers} identity providers " if providers else "")
        + f"({view}) of workspace {args.workspace} to {args.output}",
        file=sys.stderr,
    )
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a workspace's operations and agents as an operation file",
        description=(
            "Export the operations and agents of a workspace in the operation file format, so "
            "that crank apply reproduces them elsewhere. Drafts by default. Never secret "
            "values. Exit codes: 0 written, 2 usage or connection errors."
        ),
    )
    parser.add_argument("--workspace", default="default", metavar="W", help="default: default")
    parser.add_argument(
        "-o", "--output", metavar="FILE", help="write here instead of stdout (- is stdout)"
    )
    parser.add_argument(
        "--published",
        action="store_true",
        help="export what the gateways serve (latest published versions, published agents)",
    )
    parser.add_argument(
        "--format", choices=("yaml", "json"), help="default: json for a *.json FILE, else yaml"
    )
    parser.add_argument(
        "--no-workspace",
        action="store_true",
        help="leave the file's workspace out (apply it with --workspace)",
    )
    parser.set_defaults(func=run)
