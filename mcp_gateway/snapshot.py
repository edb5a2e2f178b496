"""The published catalog, loaded whole into one immutable object.

A request reads ``state.snapshot`` once and uses only that object, so a reload
(an atomic attribute swap) never shows a request half of two catalogs. Everything
that can be prepared ahead is prepared here, once per reload: tool definitions,
tools/list pages already serialized, key hashes.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import msgspec
import structlog

from mcp_gateway.tools import tool_definition
from shared.db import Connection
from shared.spec import OperationSpec, RateLimit, operation_from_builtins

log = structlog.get_logger(__name__)

DEFAULT_TOOLS_PAGE_SIZE = 500  # CRANK_MCP_TOOLS_PAGE_SIZE (DESIGN "Tools/list paging")
_encoder = msgspec.json.Encoder()


@dataclass(frozen=True, slots=True)
class Tool:
    name: str
    version: int
    spec: OperationSpec
    definition: dict[str, Any]  # as 2025 revisions list it (array results wrapped)
    modern_definition: dict[str, Any]  # as 2026-07-28 lists it


@dataclass(frozen=True, slots=True)
class Agent:
    id: int
    workspace: str
    slug: str
    published: bool
    title: str = ""
    description: str = ""
    rate_limit: RateLimit | None = None
    tools: tuple[Tool, ...] = ()  # in the order the agent binds them
    by_name: dict[str, Tool] = field(default_factory=dict)
    # JSON arrays of tool definitions, one per page of CRANK_MCP_TOOLS_PAGE_SIZE.
    pages: tuple[bytes, ...] = (b"[]",)
    modern_pages: tuple[bytes, ...] = (b"[]",)
    # Changes exactly when what tools/list shows changes (list_changed); cursors carry it.
    fingerprint: bytes = b""


@dataclass(frozen=True, slots=True)
class Key:
    id: int
    kind: str  # "agent" | "approval"
    agent_id: int
    expires_at: float | None  # unix time

    def expired(self, now: float) -> bool:
        return self.expires_at is not None and now >= self.expires_at


@dataclass(frozen=True, slots=True)
class Snapshot:
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


def _tools_for(
    published: dict[str, Any], versions: dict[tuple[int, str], tuple[int, dict[str, Any]]], ws: int
) -> tuple[Tool, ...]:
    tools: list[Tool] = []
    for name in published.get("operations") or []:
        found = versions.get((ws, name))
        if found is None:
            continue  # bound but never published: left out (DESIGN "Agent publish")
        version, raw = found
        try:
            spec = operation_from_builtins(raw)
        except msgspec.ValidationError:
            log.exception("snapshot_operation_unreadable", operation=name, version=version)
            continue
        tools.append(
            Tool(
                name=name,
                version=version,
                spec=spec,
                definition=tool_definition(spec, wrap_arrays=True),
                modern_definition=tool_definition(spec, wrap_arrays=False),
            )
        )
    return tuple(tools)


def _paged(definitions: list[dict[str, Any]], page_size: int) -> tuple[bytes, ...]:
    if not definitions:
        return (b"[]",)
    return tuple(
        _encoder.encode(definitions[start : start + page_size])
        for start in range(0, len(definitions), page_size)
    )


async def load_snapshot(conn: Connection, *, page_size: int = DEFAULT_TOOLS_PAGE_SIZE) -> Snapshot:
    """Read the whole published catalog in one repeatable-read transaction."""
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cur = await conn.execute("SELECT version FROM catalog_state")
        row = await cur.fetchone()
        version = int(row["version"]) if row else 0
        cur = await conn.execute(
            """SELECT o.workspace_id, o.name, v.version, v.spec
                 FROM operations o
                 JOIN operation_versions v ON v.operation_id = o.id AND v.version = o.latest_version"""
        )
        versions = {
            (r["workspace_id"], r["name"]): (r["version"], r["spec"]) for r in await cur.fetchall()
        }
        cur = await conn.execute(
            """SELECT a.id, a.workspace_id, w.slug AS workspace, a.slug, a.published
                 FROM agents a JOIN workspaces w ON w.id = a.workspace_id"""
        )
        agent_rows = await cur.fetchall()
        cur = await conn.execute(
            """SELECT id, hash, kind, agent_id, expires_at FROM api_keys
                WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > now())"""
        )
        key_rows = await cur.fetchall()

    agents: dict[tuple[str, str], Agent] = {}
    for r in agent_rows:
        published = r["published"]
        if published is None:
            agent = Agent(id=r["id"], workspace=r["workspace"], slug=r["slug"], published=False)
        else:
            tools = _tools_for(published, versions, r["workspace_id"])
            pages = _paged([t.definition for t in tools], page_size)
            modern_pages = _paged([t.modern_definition for t in tools], page_size)
            rate = published.get("rate_limit")
            agent = Agent(
                id=r["id"],
                workspace=r["workspace"],
                slug=r["slug"],
                published=True,
                title=published.get("title") or "",
                description=published.get("description") or "",
                rate_limit=msgspec.convert(rate, RateLimit) if rate else None,
                tools=tools,
                by_name={t.name: t for t in tools},
                pages=pages,
                modern_pages=modern_pages,
                fingerprint=hashlib.sha256(b"\0".join(modern_pages)).digest(),
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
