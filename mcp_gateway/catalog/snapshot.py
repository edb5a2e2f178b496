"""The published catalog, loaded whole into one immutable object.

A request reads ``state.snapshot`` once and uses only that object, so a reload
(an atomic attribute swap) never shows a request half of two catalogs. Everything
that can be prepared ahead is prepared here, once per reload: tool definitions,
tools/list pages already serialized, key hashes.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
import structlog

from mcp_gateway.pipeline.results import tool_definition
from shared.crypto import SecretBox
from shared.db import Connection
from shared.engine.compiler import CompiledOperation, compile_operation
from shared.engine.egress import EgressPolicy
from shared.engine.errors import Language, ToolError
from shared.engine.spec import ConfirmationMode, OperationSpec, RateLimit, operation_from_builtins
from shared.secrets import open_secrets
from shared.workspace_egress import EGRESS_COLUMNS, REACHES_NOTHING, egress_from_row

log = structlog.get_logger(__name__)

DEFAULT_TOOLS_PAGE_SIZE = 500  # CRANK_MCP_TOOLS_PAGE_SIZE (see shared.settings)
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Tool:
    """One published operation version as an agent's tool: both eras' definitions, compiled."""

    name: str
    operation_id: int
    version: int
    spec: OperationSpec
    definition: dict[str, Any]  # as 2025 revisions list it (array results wrapped)
    modern_definition: dict[str, Any]  # as 2026-07-28 lists it
    compiled: CompiledOperation  # validator, request builder, response selector


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


def _unix(value: datetime | None) -> float | None:
    return None if value is None else value.timestamp()


@dataclass(frozen=True, slots=True)
class SnapshotOptions:
    """How a snapshot is loaded: tools/list page size, tool error language, the secret box."""

    page_size: int = DEFAULT_TOOLS_PAGE_SIZE
    language: Language = "en"
    box: SecretBox | None = None  # None: no secrets are loaded (upstream auth then fails)


def _tools_for(
    published: dict[str, Any],
    versions: dict[tuple[int, str], tuple[int, int, dict[str, Any]]],
    ws: int,
    language: Language,
) -> tuple[Tool, ...]:
    tools: list[Tool] = []
    for name in published.get("operations") or []:
        found = versions.get((ws, name))
        if found is None:
            continue  # bound but never published: left out (docs/architecture.md, "Agent publish")
        operation_id, version, raw = found
        try:
            spec = operation_from_builtins(raw)
            compiled = compile_operation(spec, language=language)
        except (msgspec.ValidationError, ToolError):
            log.exception("snapshot_operation_unreadable", operation=name, version=version)
            continue
        tools.append(
            Tool(
                name=name,
                operation_id=operation_id,
                version=version,
                spec=spec,
                definition=tool_definition(spec, wrap_arrays=True),
                modern_definition=tool_definition(spec, wrap_arrays=False),
                compiled=compiled,
            )
        )
    return tuple(tools)


def _egress_of(known: dict[int, EgressPolicy], row: Mapping[str, Any]) -> EgressPolicy:
    """The policy of the row's workspace, parsed once per snapshot."""
    workspace_id = row["workspace_id"]
    found = known.get(workspace_id)
    if found is None:
        found = known[workspace_id] = egress_from_row(row, workspace_id)
    return found


def _paged(definitions: list[dict[str, Any]], page_size: int) -> tuple[bytes, ...]:
    if not definitions:
        return (b"[]",)
    return tuple(
        _encoder.encode(definitions[start : start + page_size])
        for start in range(0, len(definitions), page_size)
    )


async def load_snapshot(conn: Connection, options: SnapshotOptions | None = None) -> Snapshot:
    """Read the whole published catalog in one repeatable-read transaction."""
    options = options or SnapshotOptions()
    page_size = options.page_size
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cur = await conn.execute("SELECT version FROM catalog_state")
        row = await cur.fetchone()
        version = int(row["version"]) if row else 0
        cur = await conn.execute(
            """SELECT o.id, o.workspace_id, o.name, v.version, v.spec
                 FROM operations o
                 JOIN operation_versions v ON v.operation_id = o.id AND v.version = o.latest_version"""
        )
        versions = {
            (r["workspace_id"], r["name"]): (r["id"], r["version"], r["spec"])
            for r in await cur.fetchall()
        }
        cur = await conn.execute(
            f"""SELECT a.id, a.workspace_id, w.slug AS workspace, a.slug, a.published,
                       {EGRESS_COLUMNS}
                  FROM agents a JOIN workspaces w ON w.id = a.workspace_id"""
        )
        agent_rows = await cur.fetchall()
        cur = await conn.execute(
            """SELECT id, hash, kind, agent_id, expires_at FROM api_keys
                WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())"""
        )
        key_rows = await cur.fetchall()
        secrets: dict[int, dict[str, str]] = {}
        if options.box is not None:
            cur = await conn.execute(
                """SELECT workspace_id, name, ciphertext, nonce, key_id FROM secrets
                    WHERE workspace_id IN (SELECT workspace_id FROM agents WHERE published IS NOT NULL)"""
            )
            secrets = open_secrets(await cur.fetchall(), options.box)

    agents: dict[tuple[str, str], Agent] = {}
    egress: dict[int, EgressPolicy] = {}  # one per workspace, shared by its agents
    for r in agent_rows:
        published = r["published"]
        if published is None:
            agent = Agent(
                id=r["id"],
                workspace_id=r["workspace_id"],
                workspace=r["workspace"],
                slug=r["slug"],
                published=False,
                egress=_egress_of(egress, r),
            )
        else:
            tools = _tools_for(published, versions, r["workspace_id"], options.language)
            pages = _paged([t.definition for t in tools], page_size)
            modern_pages = _paged([t.modern_definition for t in tools], page_size)
            rate = published.get("rate_limit")
            agent = Agent(
                id=r["id"],
                workspace_id=r["workspace_id"],
                workspace=r["workspace"],
                slug=r["slug"],
                published=True,
                title=published.get("title") or "",
                description=published.get("description") or "",
                rate_limit=msgspec.convert(rate, RateLimit) if rate else None,
                confirmation_mode=published.get("confirmation_mode") or "auto",
                approval_wait_s=published.get("approval_wait_s"),
                tools=tools,
                by_name={t.name: t for t in tools},
                pages=pages,
                modern_pages=modern_pages,
                fingerprint=hashlib.sha256(b"\0".join(modern_pages)).digest(),
                secrets=secrets.get(r["workspace_id"], {}),
                egress=_egress_of(egress, r),
            )
        agents[(agent.workspace, agent.slug)] = agent
    keys = {
        bytes(r["hash"]): Key(
            id=r["id"], kind=r["kind"], agent_id=r["agent_id"], expires_at=_unix(r["expires_at"])
        )
        for r in key_rows
    }
    return Snapshot(
        version=version,
        loaded_at=time.monotonic(),
        agents=agents,
        agents_by_id={a.id: a for a in agents.values()},
        keys=keys,
    )
