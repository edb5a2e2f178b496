"""``crank tokens create|list|revoke``: admin tokens, straight against the database.

This is how the first token of a deployment comes to exist (the API needs a
token to create one), so it works from ``CRANK_DATABASE_URL`` and
``CRANK_SECRET_KEY`` alone. Without ``CRANK_DATABASE_URL``, it uses the
embedded database of the ``crank up`` running on this data directory, with
the secret key that run uses (both from its 0600 dev state file), so a
newcomer can make editor and viewer tokens. Only the token goes to stdout::

    TOKEN=$(crank tokens create --role admin)
"""

from __future__ import annotations

import argparse
import asyncio

import msgspec

from control_plane.cli.common import CliError, cli_settings, key_hasher, say
from control_plane.cli.devstate import data_dir, running_up_state
from control_plane.services.tokens import (
    IssuedToken,
    UnknownWorkspace,
    create_admin_token,
    list_admin_tokens,
    revoke_admin_token,
)
from shared.crypto import KeyHasher
from shared.db import connect
from shared.settings import Settings

ROLES = ("admin", "owner", "editor", "viewer")


def _target(settings: Settings) -> tuple[str, Settings]:
    """The database to use and the settings to hash with: CRANK_DATABASE_URL, else
    the running `crank up`'s embedded database and secret key."""
    if settings.database_url:
        return settings.database_url, settings
    state = running_up_state()
    if state is None:
        raise CliError(
            "CRANK_DATABASE_URL is not set and no `crank up` with its embedded database "
            f"runs on data directory {data_dir()}: start `crank up` (set CRANK_DATA_DIR as "
            "it has it), or point CRANK_DATABASE_URL at Crank's PostgreSQL database"
        )
    say(f"crank tokens: using the database of the running `crank up` (data directory {data_dir()})")
    return state.database_url, msgspec.structs.replace(
        settings, secret_key=settings.secret_key or state.secret_key
    )


async def _create(
    database_url: str, hasher: KeyHasher, *, role: str, workspace: str | None, name: str
) -> IssuedToken:
    async with await connect(database_url) as conn:
        try:
            issued = await create_admin_token(
                conn, hasher, name=name, role=role, workspace=workspace
            )
        except UnknownWorkspace:
            raise CliError(f"workspace {workspace!r} does not exist") from None
        await conn.commit()
    return issued


def create(args: argparse.Namespace) -> int:
    if args.role == "admin" and args.workspace is not None:
        raise CliError("--role admin is instance-wide; leave out --workspace")
    if args.role != "admin" and args.workspace is None:
        raise CliError(f"--role {args.role} is a workspace role; add --workspace W")
    database_url, settings = _target(cli_settings())
    hasher = key_hasher(settings)
    name = args.name or (f"{args.role}@{args.workspace}" if args.workspace else "admin")
    issued = asyncio.run(
        _create(database_url, hasher, role=args.role, workspace=args.workspace, name=name)
    )
    print(issued.token, flush=True)
    return 0


async def _list(database_url: str) -> int:
    async with await connect(database_url) as conn:
        tokens = await list_admin_tokens(conn)
    for token in tokens:
        state = "revoked" if token.revoked else f"last used {token.last_used_at or 'never'}"
        print(f"{token.prefix}  {token.role:<24} {token.name:<24} {token.created_at}  {state}")
    return 0


async def _revoke(database_url: str, prefix: str) -> int:
    async with await connect(database_url) as conn:
        revoked = await revoke_admin_token(conn, prefix)
        await conn.commit()
    if not revoked:
        raise CliError(f"no active admin token has the prefix {prefix!r} (crank tokens list)")
    print(f"revoked {prefix}")
    return 0


def list_tokens(_args: argparse.Namespace) -> int:
    return asyncio.run(_list(_target(cli_settings())[0]))


def revoke(args: argparse.Namespace) -> int:
    return asyncio.run(_revoke(_target(cli_settings())[0], args.prefix))


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    tokens = subparsers.add_parser(
        "tokens", help="admin tokens (straight against the database, or the running crank up's)"
    )
    actions = tokens.add_subparsers(dest="tokens_command", required=True, metavar="ACTION")
    parser = actions.add_parser(
        "create",
        help="create an admin token and print only the token",
        description=(
            "Create an admin user holding ROLE (admin: instance-wide; owner, editor, viewer: "
            "in --workspace) and a token for it. Needs CRANK_DATABASE_URL and CRANK_SECRET_KEY, "
            "or a running `crank up` (its embedded database). "
            "Prints only the token, for TOKEN=$(crank tokens create ...)."
        ),
    )
    parser.add_argument("--role", required=True, choices=ROLES)
    parser.add_argument("--workspace", metavar="W", help="workspace slug (workspace roles only)")
    parser.add_argument("--name", metavar="N", help="who or what holds the token (audit log)")
    parser.set_defaults(func=create)

    listing = actions.add_parser(
        "list",
        help="list admin tokens by prefix (never the token)",
        description="List admin tokens.",
    )
    listing.set_defaults(func=list_tokens)
    revoking = actions.add_parser(
        "revoke",
        help="revoke an admin token by its prefix",
        description="Revoke the admin token with PREFIX (as crank tokens list shows it).",
    )
    revoking.add_argument("prefix", metavar="PREFIX")
    revoking.set_defaults(func=revoke)
