"""What every ``crank`` subcommand shares: the error that ends a command, settings checks."""

from __future__ import annotations

import sys

from shared.crypto import KeyHasher
from shared.settings import Settings, SettingsError, load_settings


class CliError(Exception):
    """A command cannot go on; ``main`` prints the message and exits with ``exit_code``."""

    def __init__(self, message: str, *, exit_code: int = 2) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def cli_settings() -> Settings:
    """``load_settings()``, with a bad ``CRANK_*`` value raised as a CliError."""
    try:
        return load_settings()
    except SettingsError as exc:
        raise CliError(str(exc)) from None


def require_database_url(settings: Settings) -> str:
    """``CRANK_DATABASE_URL``; raises CliError when it is not set."""
    if not settings.database_url:
        raise CliError("CRANK_DATABASE_URL is not set: point it at Crank's PostgreSQL database")
    return settings.database_url


def key_hasher(settings: Settings) -> KeyHasher:
    """The hasher of keys and tokens, from ``CRANK_SECRET_KEY``."""
    try:
        return KeyHasher(settings.require_secret_key(), settings.secret_key_previous)
    except (SettingsError, ValueError) as exc:
        raise CliError(str(exc)) from None


def say(message: str) -> None:
    """Human-facing progress for commands whose stdout is not meant for a pipe."""
    print(message, file=sys.stderr, flush=True)
