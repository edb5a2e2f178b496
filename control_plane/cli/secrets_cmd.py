"""``crank secrets set|list|delete|rotate-key``: upstream credentials of a workspace.

The value of ``set`` comes from stdin or ``--value-file``, never from the
command line, where ``ps`` and the shell history would keep it::

    printf %s "$TOKEN" | crank secrets set --workspace default ORDERS_TOKEN
    crank secrets set --workspace default ORDERS_TOKEN --value-file token.txt

On a terminal it prompts without echo. One trailing newline is dropped (what
``echo`` and most editors add); nothing about the value is ever printed.
``rotate-key`` (instance admins) re-encrypts every stored secret under the
current ``CRANK_SECRET_KEY`` and exits 1 when some value no key opens.
Exit codes: 0 done, 1 refused by validation (bad name, empty value) or
unreadable values left by rotate-key, 2 usage or connection errors.
"""

from __future__ import annotations

import argparse
import getpass
import sys
from pathlib import Path

from control_plane.cli.client import Client, segment
from control_plane.cli.common import CliError


def _strip_newline(value: str) -> str:
    if value.endswith("\r\n"):
        return value[:-2]
    return value.removesuffix("\n")


def read_value(value_file: str | None) -> str:
    if value_file is not None:
        try:
            value = Path(value_file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise CliError(f"--value-file {value_file}: cannot read it: {exc}") from None
    elif sys.stdin.isatty():
        value = getpass.getpass("secret value (not echoed): ")
    else:
        value = sys.stdin.read()
    value = _strip_newline(value)
    if not value:
        raise CliError("the secret value is empty (pipe it on stdin or use --value-file)")
    return value


def set_secret(args: argparse.Namespace) -> int:
    value = read_value(args.value_file)
    client = Client.from_env()
    path = f"/workspaces/{segment(args.workspace)}/secrets/{segment(args.name)}"
    response = client.put(path, {"value": value})
    verb = "created" if response.status == 201 else "updated"
    print(f"secret {args.name} {verb} in workspace {args.workspace}")
    return 0


def list_secrets(args: argparse.Namespace) -> int:
    listing = Client.from_env().get(f"/workspaces/{segment(args.workspace)}/secrets")
    for secret in listing.get("items", []):
        print(f"{secret['name']}  (updated {secret['updated_at'][:19]})")
    return 0


def delete_secret(args: argparse.Namespace) -> int:
    path = f"/workspaces/{segment(args.workspace)}/secrets/{segment(args.name)}"
    Client.from_env().delete(path)
    print(f"secret {args.name} deleted from workspace {args.workspace}")
    return 0


ROTATE_TIMEOUT_S = 600.0  # one request re-seals every row, batch by batch


def rotate_key(args: argparse.Namespace) -> int:
    report = Client.from_env(timeout=ROTATE_TIMEOUT_S).post("/secrets/rotate-key", {})
    unreadable = report["unreadable"]
    print(
        f"rotated {report['rotated']}, already current {report['already_current']}, "
        f"unreadable {len(unreadable)} (key id {report['key_id']})"
    )
    for item in unreadable:
        print(
            f"unreadable {item['kind']} {item['name']} in workspace {item['workspace']} "
            f"(sealed with key id {item['key_id']})",
            file=sys.stderr,
        )
    return 1 if unreadable else 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    secrets = subparsers.add_parser("secrets", help="workspace secrets (upstream credentials)")
    actions = secrets.add_subparsers(dest="secrets_command", required=True, metavar="ACTION")

    parser = actions.add_parser(
        "set",
        help="create or replace a secret; the value is read from stdin or --value-file",
        description=(
            "Store NAME's value, encrypted. The value comes from stdin (a prompt on a "
            "terminal) or --value-file, never from the command line."
        ),
    )
    parser.add_argument("--workspace", default="default", metavar="W")
    parser.add_argument("name", metavar="NAME")
    parser.add_argument("--value-file", metavar="F", help="read the value from this file")
    parser.set_defaults(func=set_secret)

    parser = actions.add_parser("list", help="list secret names (values are never shown)")
    parser.add_argument("--workspace", default="default", metavar="W")
    parser.set_defaults(func=list_secrets)

    parser = actions.add_parser("delete", help="delete a secret")
    parser.add_argument("--workspace", default="default", metavar="W")
    parser.add_argument("name", metavar="NAME")
    parser.set_defaults(func=delete_secret)

    parser = actions.add_parser(
        "rotate-key",
        help="re-encrypt every stored secret under the current CRANK_SECRET_KEY",
        description=(
            "Re-encrypt every workspace secret and webhook signing secret sealed with a "
            "previous key (CRANK_SECRET_KEY_PREVIOUS on the control plane) under the current "
            "one. Instance admins only. Exits 1 when some value no configured key opens."
        ),
    )
    parser.set_defaults(func=rotate_key)
