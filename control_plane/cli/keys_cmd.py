"""``crank keys create|list|revoke``: agent and approval API keys, through the admin API.

``create`` prints only the key on stdout, so it can be captured::

    KEY=$(crank keys create --workspace default --agent currency-rates)

The key is shown this once; Crank keeps only its hash. Exit codes: 0 done,
1 refused by validation (unknown agent, expiry in the past), 2 usage or
connection errors (also an unknown workspace or key, or a missing role).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime
from typing import Any

from control_plane.cli.client import Client, segment
from control_plane.cli.common import CliError


def _expiry(value: str) -> str:
    """An ISO 8601 time with an offset, checked here so a typo fails before the request."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise CliError(f"--expires-at {value!r} is not an ISO 8601 time") from None
    if parsed.tzinfo is None:
        raise CliError(f"--expires-at {value!r} needs a UTC offset, e.g. 2030-01-01T00:00:00Z")
    return parsed.isoformat()


def create(args: argparse.Namespace) -> int:
    body: dict[str, Any] = {"agent": args.agent, "kind": args.kind, "name": args.name}
    if args.expires_at:
        body["expires_at"] = _expiry(args.expires_at)
    issued = Client.from_env().post(f"/workspaces/{segment(args.workspace)}/keys", body)
    key = issued.get("key") if isinstance(issued, dict) else None
    if not isinstance(key, str):
        raise CliError("the control plane's answer holds no key")
    print(key, flush=True)
    print(
        f"created {issued.get('kind')} key {issued.get('prefix')}... (id {issued.get('id')}) "
        f"for agent {args.agent}; it is shown only this once",
        file=sys.stderr,
    )
    return 0


def revoke(args: argparse.Namespace) -> int:
    view = Client.from_env().delete(f"/workspaces/{segment(args.workspace)}/keys/{args.id}")
    print(f"revoked key {view.get('prefix')}... (id {args.id}, agent {view.get('agent')})")
    return 0


def _status(key: dict[str, Any]) -> str:
    if key.get("revoked_at"):
        return "revoked"
    expires = key.get("expires_at")
    if expires and datetime.fromisoformat(expires) <= datetime.now().astimezone():
        return "expired"
    return "active"


def list_keys(args: argparse.Namespace) -> int:
    query = {"agent": args.agent} if args.agent else None
    listing = Client.from_env().get(f"/workspaces/{segment(args.workspace)}/keys", query)
    rows = [("ID", "PREFIX", "KIND", "AGENT", "STATUS", "LAST USED", "NAME")]
    for key in listing.get("items", []):
        rows.append(
            (
                str(key["id"]),
                f"{key['prefix']}...",
                key["kind"],
                key["agent"],
                _status(key),
                (key.get("last_used_at") or "never")[:16],
                key.get("name") or "",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    return 0


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    keys = subparsers.add_parser("keys", help="agent and approval API keys")
    actions = keys.add_subparsers(dest="keys_command", required=True, metavar="ACTION")

    parser = actions.add_parser(
        "create",
        help="create a key and print only the key",
        description="Create an API key for AGENT; stdout gets the key and nothing else.",
    )
    parser.add_argument("--workspace", default="default", metavar="W")
    parser.add_argument("--agent", required=True, metavar="A", help="agent slug")
    parser.add_argument(
        "--kind",
        choices=("agent", "approval"),
        default="agent",
        help="agent: for the MCP endpoint (default); approval: for the approvals endpoints",
    )
    parser.add_argument("--name", default="", metavar="N", help="a note: who holds the key")
    parser.add_argument("--expires-at", metavar="ISO", help="e.g. 2030-01-01T00:00:00Z")
    parser.set_defaults(func=create)

    parser = actions.add_parser("list", help="list keys (prefixes only, never the keys)")
    parser.add_argument("--workspace", default="default", metavar="W")
    parser.add_argument("--agent", metavar="A", help="only this agent's keys")
    parser.set_defaults(func=list_keys)

    parser = actions.add_parser("revoke", help="revoke a key at once, on every gateway")
    parser.add_argument("--workspace", default="default", metavar="W")
    parser.add_argument("id", type=int, metavar="ID", help="the key's id (crank keys list)")
    parser.set_defaults(func=revoke)
