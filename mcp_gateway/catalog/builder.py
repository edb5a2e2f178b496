"""Builds each snapshot from the last one, redoing only what changed
(docs/architecture.md, "Snapshot and refresh").

``SnapshotBuilder`` remembers what its last snapshot was made of: the digests
(mcp_gateway.catalog.changes), the published operations by workspace and name
(and by bucket of ids, as the digests group them),
the agents' rows, the keys by agent, the opened secrets by workspace, and the
compiled tools by (operation id, version, name). A build reads the digests,
fetches the groups that differ and then

- compiles only the operation versions no tool exists for yet;
- looks again only at the agents whose row, workspace operations or secrets
  changed; one whose row and secrets are unchanged and whose tools are the
  same objects stays the previous ``Agent`` object, one whose tools are the
  same keeps its serialized tools/list pages; every other agent is the
  previous object without a look;
- patches the key map for the agents whose keys changed (the rest is copied).

So a key or secret change compiles nothing and encodes no page, and a
publish of one operation compiles one tool and re-pages the agents that bind
it. Work that is large anyway (the first build, a mass publish) runs in
slices (``changes.Slicer``) with the loop getting a turn between them, and
freezes what it compiled (``gc.freeze``) every ``FREEZE_EVERY`` tools and at
its end: a full collection walks every tracked object (over a second for a
10,000-tool catalog, on the event loop), and the catalog holds no cycles for
it to find; replaced tools are freed by reference counting, frozen or not.
The remembered state is replaced only when a build finishes: a failed or
cancelled build leaves the builder as it was.
"""

from __future__ import annotations

import gc
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec
import structlog

from mcp_gateway.catalog.changes import (
    Digests,
    Slicer,
    bucket,
    changed,
    read_agents,
    read_digests,
    read_keys,
    read_operations,
    read_secrets,
    read_specs,
)
from mcp_gateway.catalog.snapshot import Agent, Key, Snapshot, SnapshotOptions, Tool
from mcp_gateway.vocabulary.tools import tool_definitions
from shared.db import Connection
from shared.engine.compiler import compile_operation
from shared.engine.egress import EgressPolicy
from shared.engine.errors import Language, ToolError
from shared.engine.spec import RateLimit, operation_from_builtins
from shared.secrets import open_secrets
from shared.workspace_egress import egress_from_row

log = structlog.get_logger(__name__)

_encoder = msgspec.json.Encoder()
ToolKey = tuple[int, int, str]  # operation id, version, the name it is bound by
Published = tuple[int, str, int, int]  # workspace id, name, operation id, latest version
_SPARE_TOOLS = 256  # replaced tools kept before a prune (see _pruned)
# A build that compiles tools freezes them out of the cyclic GC every this many
# (docs/architecture.md, "Snapshot and refresh").
FREEZE_EVERY = 512


@dataclass(frozen=True, slots=True)
class BuildStats:
    """What one build did; the refresher logs it and exports it as metrics."""

    full: bool  # nothing was remembered: everything was read and built
    seconds: float = 0.0
    compiled: int = 0  # tools compiled
    agents_rebuilt: int = 0
    keys_changed: int = 0  # agents whose keys were re-read


@dataclass(frozen=True, slots=True)
class _Memo:
    """What the last snapshot was made of."""

    snapshot: Snapshot = field(default_factory=Snapshot.empty)
    digests: Digests = field(default_factory=Digests)
    operations: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict)
    op_buckets: dict[int, list[Published]] = field(default_factory=dict)  # changes.bucket ->
    agent_rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    keys: dict[int, dict[bytes, Key]] = field(default_factory=dict)  # agent id -> its keys
    secrets: dict[int, Mapping[str, str]] = field(default_factory=dict)  # workspace id ->
    tools: dict[ToolKey, Tool] = field(default_factory=dict)
    unreadable: frozenset[ToolKey] = frozenset()  # versions that do not compile (immutable)
    built: bool = False  # False before the first build


def _paged(definitions: list[dict[str, Any]], page_size: int) -> tuple[bytes, ...]:
    if not definitions:
        return (b"[]",)
    return tuple(
        _encoder.encode(definitions[start : start + page_size])
        for start in range(0, len(definitions), page_size)
    )


def _compile(key: ToolKey, text: str, language: Language) -> Tool | None:
    operation_id, version, name = key
    try:
        spec = operation_from_builtins(msgspec.json.decode(text))
        compiled = compile_operation(spec, language=language)
    except (msgspec.ValidationError, msgspec.DecodeError, ToolError):
        log.exception("snapshot_operation_unreadable", operation=name, version=version)
        return None
    return Tool(
        name=name,
        operation_id=operation_id,
        version=version,
        definitions=tool_definitions(spec),
        compiled=compiled,
    )


def _operations_after(
    memo: _Memo, buckets: set[int], rows: list[dict[str, Any]]
) -> tuple[dict[int, dict[str, tuple[int, int]]], dict[int, list[Published]], set[int]]:
    """The published operations by workspace and name and by bucket once ``buckets``
    hold ``rows``, and the workspaces whose operations changed. Copies only what
    changes: the last snapshot's maps stay as they were."""
    op_buckets = {b: ops for b, ops in memo.op_buckets.items() if b not in buckets}
    dropped = [op for b in buckets for op in memo.op_buckets.get(b, ())]
    added: list[Published] = []
    for r in rows:
        op = (r["workspace_id"], r["name"], r["id"], r["latest_version"])
        op_buckets.setdefault(bucket(op[2]), []).append(op)
        added.append(op)
    gone, new = set(dropped) - set(added), set(added) - set(dropped)
    workspaces = {op[0] for op in gone} | {op[0] for op in new}
    operations = dict(memo.operations)
    for ws in workspaces:
        operations[ws] = dict(operations.get(ws, {}))
    for ws, name, _, _ in gone:
        operations[ws].pop(name, None)
    for ws, name, operation_id, version in new:
        operations[ws][name] = (operation_id, version)
    for ws in workspaces:
        if not operations[ws]:
            del operations[ws]
    return operations, op_buckets, workspaces


def _bound(
    row: Mapping[str, Any], operations: dict[int, dict[str, tuple[int, int]]]
) -> list[ToolKey]:
    """The tools a published agent row binds, in its order; names with no published
    version are left out (docs/architecture.md, "Agent publish")."""
    published = operations.get(row["workspace_id"], {})
    keys: list[ToolKey] = []
    for name in row["published"].get("operations") or []:
        found = published.get(name)
        if found is not None:
            keys.append((found[0], found[1], name))
    return keys


class SnapshotBuilder:
    """``build``: the next snapshot, from the database and what the last build made."""

    def __init__(self, options: SnapshotOptions | None = None) -> None:
        self._options = options or SnapshotOptions()
        self._memo = _Memo()
        self.last = BuildStats(full=True)

    async def build(self, conn: Connection) -> Snapshot:
        started = time.perf_counter()
        memo, options, slicer = self._memo, self._options, Slicer()
        full = not memo.built
        compiled = 0
        async with conn.transaction():
            await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            cur = await conn.execute("SELECT version FROM catalog_state")
            state = await cur.fetchone()
            version = int(state["version"]) if state else 0
            digests = await read_digests(conn)
            buckets = changed(memo.digests.operations, digests.operations)
            agents_changed = changed(memo.digests.agents, digests.agents)
            keys_changed = changed(memo.digests.keys, digests.keys)
            secrets_ws = changed(memo.digests.secrets, digests.secrets) if options.box else set()

            operations, op_buckets, ops_ws = memo.operations, memo.op_buckets, set[int]()
            if buckets:
                rows = await read_operations(conn, buckets & digests.operations.keys(), slicer)
                operations, op_buckets, ops_ws = _operations_after(memo, buckets, rows)
            agent_rows = memo.agent_rows
            if agents_changed:
                agent_rows = {i: r for i, r in agent_rows.items() if i not in agents_changed}
                for r in await read_agents(conn, agents_changed & digests.agents.keys()):
                    agent_rows[r["id"]] = r
            touched = [
                agent_id
                for agent_id, r in agent_rows.items()
                if agent_id in agents_changed
                or r["workspace_id"] in ops_ws
                or r["workspace_id"] in secrets_ws
            ]
            # Tools the touched agents bind that no build has made yet.
            missing: dict[ToolKey, None] = {}
            for agent_id in touched:
                r = agent_rows[agent_id]
                if r["published"] is not None:
                    for key in _bound(r, operations):
                        if key not in memo.tools and key not in memo.unreadable:
                            missing[key] = None
            wanted = {(k[0], k[1]) for k in missing}
            specs = {
                (s["operation_id"], s["version"]): s["spec"]
                for s in await read_specs(conn, wanted, slicer)
            }
            key_rows = await read_keys(conn, keys_changed & digests.keys.keys(), slicer)
            secret_rows = await read_secrets(conn, secrets_ws & digests.secrets.keys())

        tools = dict(memo.tools) if missing else memo.tools
        unreadable = set(memo.unreadable)
        for key in missing:
            text = specs.get((key[0], key[1]))
            if text is None:  # cannot happen in one repeatable read; try again next build
                continue
            tool = _compile(key, text, options.language)
            if tool is None:
                unreadable.add(key)
            else:
                tools[key] = tool
                compiled += 1
                if compiled % FREEZE_EVERY == 0:
                    gc.freeze()  # the tools so far: the collections during the build skip them
            await slicer.tick()

        secrets = memo.secrets
        if secrets_ws:
            assert options.box is not None
            secrets = {ws: s for ws, s in secrets.items() if ws not in secrets_ws}
            secrets.update(open_secrets(secret_rows, options.box))

        previous = memo.snapshot
        agents_by_id = dict(previous.agents_by_id)
        for gone in agents_changed - agent_rows.keys():
            agents_by_id.pop(gone, None)
        egress: dict[int, EgressPolicy] = {}  # one per workspace in this build
        rebuilt = 0
        for agent_id in touched:
            old = previous.agents_by_id.get(agent_id)
            row = agent_rows[agent_id]
            # Its row and its secrets (an unpublished agent holds none) are unchanged:
            # the same object if its tools are.
            keep = agent_id not in agents_changed and (
                row["published"] is None or row["workspace_id"] not in secrets_ws
            )
            agent = self._agent(row, old, operations, tools, secrets, egress, keep=keep)
            if agent is not old:
                agents_by_id[agent_id] = agent
                rebuilt += 1
            await slicer.tick()
        if rebuilt or agents_changed:
            agents = {(a.workspace, a.slug): a for a in agents_by_id.values()}
        else:
            agents, agents_by_id = previous.agents, previous.agents_by_id

        keys_by_agent, keys = memo.keys, previous.keys
        if keys_changed:
            keys_by_agent = {a: k for a, k in memo.keys.items() if a not in keys_changed}
            keys = dict(previous.keys)
            for agent_id in keys_changed:
                for digest in memo.keys.get(agent_id, ()):
                    keys.pop(digest, None)
            for r in key_rows:
                expires = r["expires_at"]
                live = Key(
                    id=r["id"],
                    kind=r["kind"],
                    agent_id=r["agent_id"],
                    expires_at=None if expires is None else expires.timestamp(),
                )
                digest = bytes(r["hash"])
                keys[digest] = live
                keys_by_agent.setdefault(live.agent_id, {})[digest] = live

        if ops_ws or agents_changed:
            tools = await self._pruned(tools, agents_by_id, slicer)
        snapshot = Snapshot(
            version=version,
            loaded_at=time.monotonic(),
            agents=agents,
            agents_by_id=agents_by_id,
            keys=keys,
        )
        if full or compiled >= FREEZE_EVERY:
            gc.freeze()
        self._memo = _Memo(
            snapshot=snapshot,
            digests=digests,
            operations=operations,
            op_buckets=op_buckets,
            agent_rows=agent_rows,
            keys=keys_by_agent,
            secrets=secrets,
            tools=tools,
            unreadable=frozenset(unreadable),
            built=True,
        )
        self.last = BuildStats(
            full=full,
            seconds=time.perf_counter() - started,
            compiled=compiled,
            agents_rebuilt=rebuilt,
            keys_changed=len(keys_changed),
        )
        return snapshot

    @staticmethod
    async def _pruned(
        tools: dict[ToolKey, Tool], agents_by_id: Mapping[int, Agent], slicer: Slicer
    ) -> dict[ToolKey, Tool]:
        """Forget the tools no agent serves any more once there are ``_SPARE_TOOLS`` of
        them (a few MB): a publish then drops its old version some publishes later,
        without walking the whole catalog each time."""
        bound = sum(len(a.tools) for a in agents_by_id.values())  # shared tools count twice
        if len(tools) <= bound + _SPARE_TOOLS:
            return tools
        served: dict[ToolKey, Tool] = {}
        for agent in agents_by_id.values():
            for t in agent.tools:
                served[(t.operation_id, t.version, t.name)] = t
            await slicer.tick()
        return served

    def _agent(
        self,
        row: Mapping[str, Any],
        old: Agent | None,
        operations: dict[int, dict[str, tuple[int, int]]],
        tools: dict[ToolKey, Tool],
        secrets: Mapping[int, Mapping[str, str]],
        egress: dict[int, EgressPolicy],
        *,
        keep: bool,
    ) -> Agent:
        """The agent of ``row``; ``old`` itself when ``keep`` (its row and secrets are
        unchanged) and its tools are the same objects."""
        workspace_id = row["workspace_id"]
        policy = egress.get(workspace_id)
        if policy is None:
            policy = egress[workspace_id] = egress_from_row(row, workspace_id)
        published = row["published"]
        if published is None:
            if keep and old is not None and not old.published:
                return old
            return Agent(
                id=row["id"],
                workspace_id=workspace_id,
                workspace=row["workspace"],
                slug=row["slug"],
                published=False,
                egress=policy,
            )
        own = tuple(tools[k] for k in _bound(row, operations) if k in tools)
        if (
            old is not None
            and old.published
            and len(old.tools) == len(own)
            and all(a is b for a, b in zip(old.tools, own, strict=True))
        ):
            if keep:
                return old
            pages, modern_pages, fingerprint = old.pages, old.modern_pages, old.fingerprint
        else:
            page_size = self._options.page_size
            pages = _paged([t.definition for t in own], page_size)
            modern_pages = _paged([t.modern_definition for t in own], page_size)
            fingerprint = hashlib.sha256(b"\0".join(modern_pages)).digest()
        rate = published.get("rate_limit")
        return Agent(
            id=row["id"],
            workspace_id=workspace_id,
            workspace=row["workspace"],
            slug=row["slug"],
            published=True,
            title=published.get("title") or "",
            description=published.get("description") or "",
            rate_limit=msgspec.convert(rate, RateLimit) if rate else None,
            confirmation_mode=published.get("confirmation_mode") or "auto",
            approval_wait_s=published.get("approval_wait_s"),
            tools=own,
            by_name={t.name: t for t in own},
            pages=pages,
            modern_pages=modern_pages,
            fingerprint=fingerprint,
            secrets=secrets.get(workspace_id, {}),
            egress=policy,
        )


async def load_snapshot(conn: Connection, options: SnapshotOptions | None = None) -> Snapshot:
    """The whole published catalog, built from nothing."""
    return await SnapshotBuilder(options).build(conn)
