"""Settings read from ``CRANK_*`` environment variables (documented in docs/settings.md)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Literal

import msgspec


class SettingsError(ValueError):
    """A ``CRANK_*`` variable holds a value Crank cannot use."""


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    database_url: str | None = None
    secret_key: str | None = None
    secret_key_previous: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    control_plane_port: int = 8000
    gateway_port: int = 8080
    metrics_port: int = 9090
    mcp_refresh_ms: int = 5000
    mcp_session_ttl_s: int = 86400
    mcp_listen: bool = True  # LISTEN for publishes; false behind a transaction-pooling PgBouncer
    mcp_tools_page_size: int = 500  # tools per tools/list page (DESIGN "Tools/list paging")
    allow_private_upstreams: bool = False
    upstream_allowlist: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    public_path_prefix: str = ""
    language: Literal["en", "ru"] = "en"
    log_level: str = "info"
    max_body_bytes: int = 1_048_576
    db_pool_size: int = 10

    def require_secret_key(self) -> str:
        if not self.secret_key:
            raise SettingsError(
                "CRANK_SECRET_KEY is not set: it encrypts secrets and hashes API keys. "
                "Generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        return self.secret_key


_BOOL = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}


def _convert(name: str, raw: str, annotation: Any) -> Any:
    if annotation in ("int", int):
        try:
            return int(raw)
        except ValueError:
            raise SettingsError(f"CRANK_{name.upper()} must be an integer, got {raw!r}") from None
    if annotation in ("bool", bool):
        value = _BOOL.get(raw.strip().lower())
        if value is None:
            raise SettingsError(f"CRANK_{name.upper()} must be true or false, got {raw!r}")
        return value
    if getattr(annotation, "__origin__", None) is tuple:
        return tuple(part.strip() for part in raw.split(",") if part.strip())
    return raw


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build settings from the environment; empty variables count as unset."""
    env = os.environ if environ is None else environ
    values: dict[str, Any] = {}
    for field in msgspec.structs.fields(Settings):
        raw = env.get(f"CRANK_{field.name.upper()}")
        if raw is None or raw == "":
            continue
        values[field.name] = _convert(field.name, raw, field.type)
    settings = Settings(**values)
    if settings.language not in ("en", "ru"):
        raise SettingsError(f"CRANK_LANGUAGE must be en or ru, got {settings.language!r}")
    if settings.mcp_refresh_ms < 100:
        raise SettingsError("CRANK_MCP_REFRESH_MS must be at least 100")
    if not 1 <= settings.mcp_tools_page_size <= 10_000:
        raise SettingsError("CRANK_MCP_TOOLS_PAGE_SIZE must be between 1 and 10000")
    return settings
