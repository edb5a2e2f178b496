"""The published catalog as one immutable object.

A request reads ``state.snapshot`` once and uses only that object, so a reload
(an atomic attribute swap) never shows a request half of two catalogs. Everything
that can be prepared ahead is prepared once (mcp_gateway.catalog.builder, which
reuses the unchanged parts of the previous snapshot): tool definitions, tools/list
pages already serialized, key hashes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec

from mcp_gateway.catalog.access import KEYS_ONLY, AgentAccess
from shared.crypto import SecretBox
from shared.engine.compiler import CompiledOperation
from shared.engine.egress import EgressPolicy
from shared.engine.errors import Language
from shared.engine.spec import ConfirmationMode, OperationSpec, RateLimit
from shared.identity.provider_sets import IdentityParts
from shared.workspace_egress import REACHES_NOTHING

DEFAULT_TOOLS_PAGE_SIZE = 500  # CRANK_MCP_TOOLS_PAGE_SIZE (see shared.settings)
_MAX_NARROWED = 64  # lists kept per agent for callers whose scopes hide some tools
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Tool:
    """One published operation version as an agent's tool: both eras' definitions, compiled."""

    name: str
    operation_id: int
    version: int
    # As 2025 revisions list it (array results wrapped), and as 2026-07-28 lists it.
    definitions: tuple[dict[str, Any], dict[str, Any]]
    compiled: CompiledOperation  # validator, request builder, response selector
    scopes: frozenset[str] = frozenset()  # a token must hold these, beyond its agent's

    @property
    def spec(self) -> OperationSpec:
        return self.compiled.spec

    @property
    def definition(self) -> dict[str, Any]:
        return self.definitions[0]

    @property
    def modern_definition(self) -> dict[str, Any]:
        return self.definitions[1]


@dataclass(frozen=True, slots=True)
class Agent:
    """An agent, published or not (its keys resolve either way, for a 404), with its tools ready."""

    id: int
    workspace_id: int  # for the call log, which stores ids
    workspace: str
    slug: str
    published: bool
    title: str = ""
    description: str = ""
    rate_limit: RateLimit | None = None
    confirmation_mode: ConfirmationMode = "auto"  # AgentSpec.confirmation_mode
    approval_wait_s: int | None = None  # lowers CRANK_APPROVAL_WAIT_S for this agent
    tools: tuple[Tool, ...] = ()  # in the order the agent binds them
    by_name: dict[str, Tool] = field(default_factory=dict)
    # JSON arrays of tool definitions, one per page of CRANK_MCP_TOOLS_PAGE_SIZE.
    pages: tuple[bytes, ...] = (b"[]",)
    modern_pages: tuple[bytes, ...] = (b"[]",)
    # Changes exactly when what tools/list shows changes (list_changed); cursors carry it.
    fingerprint: bytes = b""
    # The workspace's secrets, decrypted, for upstream auth (shared by its agents).
    secrets: Mapping[str, str] = field(default_factory=dict)
    # The workspace's egress policy, which every upstream call of its tools is sent under.
    egress: EgressPolicy = REACHES_NOTHING
    tool_scopes: frozenset[str] = frozenset()  # every scope one of its tools needs
    # Tokens of identity providers besides (or instead of) keys (mcp_gateway.catalog.access).
    access: AgentAccess = KEYS_ONLY
    # What a caller with fewer scopes sees, made when first asked (``listed_for``).
    _narrowed: dict[frozenset[str], ToolList] = field(default_factory=dict)

    def listed_for(self, scopes: frozenset[str] | None, page_size: int) -> ToolList:
        """The tools a caller holding ``scopes`` may see (None: a key, which sees all)."""
        if scopes is None or self.tool_scopes <= scopes:
            return ToolList(self.tools, self.pages, self.modern_pages, self.fingerprint)
        held = self.tool_scopes & scopes
        narrowed = self._narrowed.get(held)
        if narrowed is None:
            if len(self._narrowed) >= _MAX_NARROWED:
                self._narrowed.clear()
            own = tuple(t for t in self.tools if t.scopes <= held)
            narrowed = self._narrowed[held] = tool_list(own, page_size)
        return narrowed


class ToolList(NamedTuple):
    """What tools/list shows: the tools, their pages in both eras, their fingerprint."""

    tools: tuple[Tool, ...]
    pages: tuple[bytes, ...]
    modern_pages: tuple[bytes, ...]
    fingerprint: bytes


def tool_list(tools: tuple[Tool, ...], page_size: int) -> ToolList:
    """``tools`` paged and serialized; the fingerprint changes exactly when what a
    client sees changes: the definitions, or the scopes that show or hide a tool."""
    pages = _paged([t.definition for t in tools], page_size)
    modern_pages = _paged([t.modern_definition for t in tools], page_size)
    listed = b"\0".join(modern_pages)
    if any(t.scopes for t in tools):
        listed += b"\1" + b"\0".join(" ".join(sorted(t.scopes)).encode() for t in tools)
    return ToolList(tools, pages, modern_pages, hashlib.sha256(listed).digest())


def _paged(definitions: list[dict[str, Any]], page_size: int) -> tuple[bytes, ...]:
    if not definitions:
        return (b"[]",)
    return tuple(
        _encoder.encode(definitions[start : start + page_size])
        for start in range(0, len(definitions), page_size)
    )


@dataclass(frozen=True, slots=True)
class Key:
    """An agent or approval key as the snapshot knows it; found by its HMAC hash."""

    id: int
    kind: str  # "agent" | "approval"
    agent_id: int
    expires_at: float | None  # unix time

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The published catalog at one version: agents by (workspace, slug) and by id, keys by hash."""

    version: int
    loaded_at: float  # time.monotonic()
    agents: dict[tuple[str, str], Agent]
    agents_by_id: dict[int, Agent]
    keys: dict[bytes, Key]

    @classmethod
    def empty(cls) -> Snapshot:
        return cls(version=0, loaded_at=time.monotonic(), agents={}, agents_by_id={}, keys={})


@dataclass(frozen=True, slots=True)
class SnapshotOptions:
    """How snapshots are built: tools/list page size, tool error language, the secret box."""

    page_size: int = DEFAULT_TOOLS_PAGE_SIZE
    language: Language = "en"
    box: SecretBox | None = None  # None: no secrets are loaded (upstream auth then fails)
    # Token checks of identity providers; None: agents take keys only.
    identity: IdentityParts | None = None
    public_url: str = ""  # CRANK_PUBLIC_URL: with the prefix, each agent's canonical URL
    path_prefix: str = ""  # CRANK_PUBLIC_PATH_PREFIX
