"""The published catalog as one immutable object.

A request reads ``state.snapshot`` once and uses only that object, so a reload
(an atomic attribute swap) never shows a request half of two catalogs. Everything
that can be prepared ahead is prepared once (mcp_gateway.catalog.builder, which
reuses the unchanged parts of the previous snapshot): tool definitions, tools/list
pages already serialized, key hashes.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from shared.crypto import SecretBox
from shared.engine.compiler import CompiledOperation
from shared.engine.egress import EgressPolicy
from shared.engine.errors import Language
from shared.engine.spec import ConfirmationMode, OperationSpec, RateLimit
from shared.workspace_egress import REACHES_NOTHING

DEFAULT_TOOLS_PAGE_SIZE = 500  # CRANK_MCP_TOOLS_PAGE_SIZE (see shared.settings)


@dataclass(frozen=True, slots=True)
class Tool:
    """One published operation version as an agent's tool: both eras' definitions, compiled."""

    name: str
    operation_id: int
    version: int
    # As 2025 revisions list it (array results wrapped), and as 2026-07-28 lists it.
    definitions: tuple[dict[str, Any], dict[str, Any]]
    compiled: CompiledOperation  # validator, request builder, response selector

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
