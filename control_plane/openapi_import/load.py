"""Reading an OpenAPI document: text (JSON or YAML) or a URL, and its version.

A URL is fetched through ``shared.engine.outbound.UpstreamExecutor``, so the same
SSRF guard that protects upstream calls decides where the control plane may
connect (``CRANK_ALLOW_PRIVATE_UPSTREAMS``, ``CRANK_UPSTREAM_ALLOWLIST``,
cloud metadata always refused), redirects included.

YAML is read with the safe loader (libyaml's when present); timestamps stay
strings (``2024-01-01`` in an ``example`` is text in JSON Schema, not a date).
Everything the importer produces is JSON, so a document that only YAML could
express (non-string keys, say) is normalized where it is used.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
import yaml
from yarl import URL

from shared.engine.egress import Blocked, EgressPolicy
from shared.engine.outbound import (
    ExecutorConfig,
    OutboundError,
    UpstreamBlocked,
    UpstreamExecutor,
    UpstreamRequest,
)
from shared.engine.ssrf import AddressPolicy

Version = Literal["2.0", "3.0", "3.1"]

MAX_DOCUMENT_BYTES = 32 * 1024 * 1024  # the default of CRANK_MAX_DOCUMENT_BYTES
# YAML aliases can make a small text expand exponentially ("billion laughs"): the
# document is refused when walking it as a tree would visit more values than this.
MAX_YAML_NODES = 5_000_000
FETCH_TIMEOUT_MS = 30_000

_json = msgspec.json.Decoder()
_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class SpecError(Exception):
    """The document cannot be imported at all (unreadable, unreachable, not OpenAPI)."""

    def __init__(
        self, message: str, *, code: str = "openapi_invalid", blocked: Blocked | None = None
    ) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.blocked = blocked  # the egress layer that refused the URL, for the remedy


class _Loader(_BaseLoader):  # type: ignore[valid-type,misc]
    """The safe loader, with timestamps kept as the text they were written as."""


_Loader.add_constructor(
    "tag:yaml.org,2002:timestamp",
    lambda loader, node: loader.construct_scalar(node),
)


def parse_document(text: str | bytes) -> dict[str, Any]:
    """JSON first (fast, and most large documents are JSON), then YAML."""
    try:
        value = _json.decode(text)
    except msgspec.DecodeError:
        value = _yaml(text)
    if not isinstance(value, dict):
        raise SpecError("the document is not a JSON/YAML object")
    return value


def _yaml(text: str | bytes) -> Any:
    try:
        value = yaml.load(text, Loader=_Loader)  # noqa: S506 - a safe loader subclass
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = " ".join(p for p in (exc.context, exc.problem) if p)
        raise SpecError(f"not valid JSON or YAML{where}: {problem}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"not valid JSON or YAML: {exc}") from None
    if not _fits(value, MAX_YAML_NODES):
        raise SpecError("the YAML expands to too many values (aliases of aliases?)")
    return value


def _fits(value: Any, limit: int) -> bool:
    """Whether ``value``, walked as a tree (aliases expanded), has at most ``limit`` values."""
    stack = [value]
    seen = 0
    while stack:
        current = stack.pop()
        seen += 1
        if seen > limit:
            return False
        if isinstance(current, dict):
            stack.extend(current.values())
        elif isinstance(current, list):
            stack.extend(current)
    return True


def detect_version(document: dict[str, Any]) -> Version:
    """What ``swagger``/``openapi`` names: "2.0", "3.0" or "3.1"; raises SpecError otherwise."""
    openapi = document.get("openapi")
    if isinstance(openapi, str):
        if openapi.startswith("3.0"):
            return "3.0"
        if openapi.startswith("3.1"):
            return "3.1"
        raise SpecError(f"OpenAPI {openapi} is not supported (3.0, 3.1 and Swagger 2.0 are)")
    swagger = document.get("swagger")
    if str(swagger) == "2.0":
        return "2.0"
    if swagger is not None:
        raise SpecError(f"Swagger {swagger} is not supported (only 2.0)")
    raise SpecError('not an OpenAPI document: no "openapi" or "swagger" field')


async def fetch_document(
    url: str, policy: AddressPolicy, egress: EgressPolicy, max_bytes: int = MAX_DOCUMENT_BYTES
) -> bytes:
    """GET ``url`` through the guarded executor, under the workspace's ``egress``
    policy (it reads a host as try-it does); the body (at most ``max_bytes``), or
    ``SpecError``."""
    if not url.startswith(("http://", "https://")):
        raise SpecError("the URL must start with http:// or https://", code="bad_request")
    config = ExecutorConfig(limit=4, limit_per_host=4, max_response_bytes=max_bytes)
    try:
        encoded = str(URL(url))
    except ValueError as exc:
        raise SpecError(f"not a valid URL: {exc}", code="bad_request") from None
    request = UpstreamRequest(
        method="GET",
        url=encoded,  # percent-encoded, as the executor expects
        headers=(("Accept", "application/json, application/yaml;q=0.9, */*;q=0.5"),),
        timeout_ms=FETCH_TIMEOUT_MS,
        retries=1,
        egress=egress,
    )
    try:
        async with UpstreamExecutor(policy, config) as executor:
            response = await executor.execute(request)
    except OutboundError as exc:
        blocked = exc.blocked if isinstance(exc, UpstreamBlocked) else None
        raise SpecError(f"cannot fetch {url}: {exc}", code=exc.code, blocked=blocked) from None
    if not 200 <= response.status < 300:
        raise SpecError(
            f"fetching {url} answered HTTP {response.status}", code="upstream_bad_status"
        )
    return response.body
