"""Settings read from ``CRANK_*`` environment variables (documented in docs/settings.md)."""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from typing import Any, Literal

import msgspec


class SettingsError(ValueError):
    """A ``CRANK_*`` variable holds a value Crank cannot use."""


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    """Every ``CRANK_*`` setting with its default; build it with ``load_settings``."""

    database_url: str | None = None
    # The gateway loads catalog snapshots from here (a read replica) instead of the
    # primary; everything else stays on CRANK_DATABASE_URL (docs/architecture.md,
    # "Snapshot loads from a read replica").
    snapshot_database_url: str | None = None
    secret_key: str | None = None
    secret_key_previous: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    control_plane_port: int = 8000
    gateway_port: int = 8080
    metrics_port: int = 9090
    # granian workers of `crank mcp-server`; 0: one per CPU this process may use, the
    # container's CPU quota included (docs/architecture.md, "Gateway workers").
    gateway_workers: int = 0
    mcp_refresh_ms: int = 5000
    mcp_session_ttl_s: int = 86400
    mcp_listen: bool = True  # LISTEN for publishes; false behind a transaction-pooling PgBouncer
    mcp_tools_page_size: int = (
        500  # tools per tools/list page (docs/architecture.md, "Tools/list paging")
    )
    # tools/call per key: "REQUESTS/SECONDS", or "off"; an agent's rate_limit overrides it.
    rate_limit: str = "600/60"
    # Database look-ups of keys the snapshot does not know: "REQUESTS/SECONDS" or "off",
    # per process and per client address (docs/architecture.md, "Keys").
    key_lookup_limit: str = "20/1"
    key_lookup_limit_per_address: str = "5/10"
    # Failed admin-token attempts per client address, "REQUESTS/SECONDS" or "off": each
    # costs the control plane a query (docs/architecture.md, "Request admission").
    admin_token_failure_limit: str = "10/60"  # noqa: S105 (a rate, not a secret)
    # Addresses or networks of proxies whose X-Forwarded-For names the client address.
    trusted_proxies: tuple[str, ...] = ()
    mcp_max_batch_items: int = 100  # messages in one 2025-03-26 JSON-RPC batch
    mcp_max_batch_answer_bytes: int = 4_194_304  # past this, a batch's later requests are not run
    call_log_flush_ms: int = 1000  # the call log is written in batches this often
    # Retention in days; 0 keeps rows forever (docs/architecture.md, "Retention").
    call_log_retention_days: int = 30
    audit_log_retention_days: int = 365
    approvals_retention_days: int = 90  # finished approvals (denied, expired, completed, failed)
    webhook_retention_days: int = 30  # delivered and failed webhook deliveries
    # Safety flows (docs/architecture.md, "Gate order").
    approval_ttl_s: int = 86400  # a pending approval expires after this
    approval_max_attempts: int = 3  # claims of one approved row before it fails
    # A finished approval's outcome goes to a repeat of its call for this long.
    approval_outcome_retention_s: int = 86400
    approval_workers: int = 32  # approved calls one gateway process runs at once
    approval_shutdown_grace_s: int = 10  # on SIGTERM, running approved calls may finish this long
    # A tools/call with a progress token is held open this long for its approval's
    # decision (docs/architecture.md, "Waiting for a decision"); 0 never waits.
    approval_wait_s: int = 55
    confirmation_ttl_s: int = 300  # a DELETE confirmation token is valid this long
    elicitation_ttl_s: int = 300  # a human has this long to answer a DELETE confirmation form
    idempotency_retention_s: int = 86400  # how long a completed idempotent call is replayed
    allow_private_upstreams: bool = False
    # Loopback upstreams (127.0.0.0/8, ::1) open to every workspace; `crank up` on loopback.
    allow_loopback_upstreams: bool = False
    upstream_allowlist: tuple[str, ...] = ()
    # What one upstream answer may cost (docs/architecture.md, "Upstream answers"):
    # the ceiling of every raw body limit, and the JSON values and keys it may decode to.
    upstream_max_response_bytes: int = 10 * 1024 * 1024
    upstream_max_json_nodes: int = 250_000
    allowed_origins: tuple[str, ...] = ()
    public_path_prefix: str = ""
    # The gateway's public base URL (https://crank.example.com): links in webhooks.
    public_url: str = ""
    # Webhooks (docs/architecture.md, "Webhooks"): the first retry's backoff, doubling
    # after each failed attempt, and how long after the event a delivery is tried.
    webhook_retry_base_ms: int = 5000
    webhook_max_age_s: int = 86400
    language: Literal["en", "ru"] = "en"
    log_level: str = "info"
    # OpenTelemetry tracing of the gateway; the standard OTEL_* variables configure the
    # exporter (docs/tracing.md).
    otel_enabled: bool = False
    max_body_bytes: int = 1_048_576  # an MCP request, and an admin API route's JSON body
    # A gateway request's body must be whole this long after its read starts, and one key
    # may have this many bodies unfinished per process (docs/architecture.md, "Unfinished bodies").
    mcp_body_timeout_s: int = 10
    mcp_unfinished_bodies_per_key: int = 16
    # The body of apply and OpenAPI import (editors only), and an OpenAPI document fetched by URL.
    max_document_bytes: int = 33_554_432
    db_pool_size: int = 10
    # The web console (docs/architecture.md, "The console"): how long a sign-in lasts,
    # and the session cookie's Secure flag: auto = when the request came over https
    # (set "always" behind a proxy that terminates TLS).
    console_session_ttl_s: int = 43200
    console_cookie_secure: Literal["auto", "always", "never"] = "auto"

    def default_rate_limit(self) -> tuple[int, int] | None:
        """(requests, per_seconds) of CRANK_RATE_LIMIT; None when it is "off"."""
        return parse_rate_limit(self.rate_limit)

    def require_secret_key(self) -> str:
        if not self.secret_key:
            raise SettingsError(
                "CRANK_SECRET_KEY is not set: it encrypts secrets and hashes API keys. "
                "Generate one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        return self.secret_key


def parse_rate_limit(raw: str, name: str = "CRANK_RATE_LIMIT") -> tuple[int, int] | None:
    """(requests, per_seconds) of a "REQUESTS/SECONDS" setting; None when it is "off"."""
    text = raw.strip().lower()
    if text in ("off", "none", "0"):
        return None
    requests, slash, seconds = text.partition("/")
    try:
        value = (int(requests), int(seconds)) if slash else None
    except ValueError:
        value = None
    if value is None or value[0] < 1 or not 1 <= value[1] <= 86400:
        raise SettingsError(f"{name} must be REQUESTS/SECONDS (e.g. 600/60) or off, got {raw!r}")
    return value


def _check_networks(entries: tuple[str, ...]) -> None:
    for entry in entries:
        try:
            ipaddress.ip_network(entry)
        except ValueError:
            raise SettingsError(
                f"CRANK_TRUSTED_PROXIES holds addresses or networks (e.g. 10.0.0.0/8), "
                f"got {entry!r}"
            ) from None


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


def usable_cpus() -> int:
    """The CPUs this process may run on, capped by a cgroup v2 CPU quota (a container's
    ``resources.limits.cpu``), rounded up; at least 1."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    try:
        with open("/sys/fs/cgroup/cpu.max") as cpu_max:
            quota, period = cpu_max.read().split()
        if quota != "max":
            cpus = min(cpus, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cpus)


_LIFETIMES_S = (
    "approval_ttl_s",
    "approval_outcome_retention_s",
    "confirmation_ttl_s",
    "elicitation_ttl_s",
    "idempotency_retention_s",
    "console_session_ttl_s",
)
_RETENTION_DAYS = (
    "call_log_retention_days",
    "audit_log_retention_days",
    "approvals_retention_days",
    "webhook_retention_days",
)
# The integer settings that have bounds: (names, lowest, highest).
_RANGES: tuple[tuple[tuple[str, ...], int, int], ...] = (
    (("mcp_max_batch_items",), 1, 10_000),
    (("mcp_max_batch_answer_bytes",), 65_536, 1_073_741_824),
    (("call_log_flush_ms",), 100, 60_000),
    (_LIFETIMES_S, 1, 31_536_000),
    (("approval_max_attempts",), 1, 100),
    (("approval_workers",), 1, 256),
    (("approval_shutdown_grace_s", "approval_wait_s"), 0, 3600),
    (_RETENTION_DAYS, 0, 36_500),
    (("upstream_max_response_bytes",), 1024, 104_857_600),
    (("upstream_max_json_nodes",), 1000, 10_000_000),
    (("max_body_bytes", "max_document_bytes"), 1024, 1 << 30),
    (("webhook_retry_base_ms",), 10, 3_600_000),
    (("webhook_max_age_s",), 1, 604_800),
    (("mcp_tools_page_size",), 1, 10_000),
    (("mcp_body_timeout_s",), 1, 300),
    (("mcp_unfinished_bodies_per_key",), 1, 10_000),
)


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
    if settings.console_cookie_secure not in ("auto", "always", "never"):
        raise SettingsError(
            "CRANK_CONSOLE_COOKIE_SECURE must be auto, always or never, "
            f"got {settings.console_cookie_secure!r}"
        )
    if settings.mcp_refresh_ms < 100:
        raise SettingsError("CRANK_MCP_REFRESH_MS must be at least 100")
    settings.default_rate_limit()  # raises on a value it cannot read
    parse_rate_limit(settings.key_lookup_limit, "CRANK_KEY_LOOKUP_LIMIT")
    parse_rate_limit(settings.key_lookup_limit_per_address, "CRANK_KEY_LOOKUP_LIMIT_PER_ADDRESS")
    parse_rate_limit(settings.admin_token_failure_limit, "CRANK_ADMIN_TOKEN_FAILURE_LIMIT")
    _check_networks(settings.trusted_proxies)
    for names, low, high in _RANGES:
        for name in names:
            if not low <= getattr(settings, name) <= high:
                raise SettingsError(f"CRANK_{name.upper()} must be between {low} and {high}")
    if settings.public_url and not re.fullmatch(r"https?://[^/?#\s]+/?", settings.public_url):
        raise SettingsError(
            "CRANK_PUBLIC_URL must be a scheme and host, e.g. https://crank.example.com"
        )
    if not 0 <= settings.gateway_workers <= 256:
        raise SettingsError("CRANK_GATEWAY_WORKERS must be between 0 (one per CPU) and 256")
    return settings
