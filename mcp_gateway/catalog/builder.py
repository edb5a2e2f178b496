"""Builds each snapshot from the last one, redoing only what changed
(docs/architecture.md, "Snapshot and refresh").

``SnapshotBuilder`` remembers what its last snapshot was made of (``_Memo``: the
digests of mcp_gateway.catalog.changes, the rows they stand for, the opened
secrets, the compiled tools). A build runs these phases, each a function of what
the ones before it handed on:

- ``_read_changes``: in one repeatable-read transaction, the digests, the rows
  of the groups that differ, the agents to look at again and the tools they
  bind that no build has made yet;
- ``_compile_missing`` compiles only those operation versions;
- ``_open_changed_secrets`` opens only the workspaces whose secrets changed;
- ``_rebuild_agents`` looks again only at the agents whose row, workspace
  operations or secrets changed; one whose row and secrets are unchanged and
  whose tools are the same objects stays the previous ``Agent`` object, one
  whose tools are the same keeps its serialized tools/list pages; every other
  agent is the previous object without a look;
- ``_patch_keys`` patches the key map for the agents whose keys changed (the
  rest is copied);
- ``_prune_tools`` forgets, now and then, the tools no agent serves any more;
- ``_assemble``: the snapshot, and what the next build remembers.

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
import time
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import msgspec
import structlog

from mcp_gateway.catalog.access import (
    KEYS_ONLY,
    AgentAccess,
    access_inputs,
    agent_access,
    providers_by_name,
)
from mcp_gateway.catalog.changes import (
    Digests,
    Slicer,
    bucket,
    changed,
    read_agents,
    read_digests,
    read_identity,
    read_keys,
    read_operations,
    read_secrets,
    read_specs,
)
from mcp_gateway.catalog.snapshot import (
    Agent,
    Key,
    Snapshot,
    SnapshotOptions,
    Tool,
    ToolList,
    tool_list,
)
from shared.db import Connection
from shared.engine.compiler import compile_operation
from shared.engine.egress import EgressPolicy
from shared.engine.errors import Language, ToolError
from shared.engine.spec import RateLimit, operation_from_builtins
from shared.engine.tool_definition import tool_definitions
from shared.identity.provider_sets import ProviderSettings
from shared.secrets import open_secrets
from shared.workspace_egress import egress_from_row

log = structlog.get_logger(__name__)

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
    identity: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # workspace id ->
    tools: dict[ToolKey, Tool] = field(default_factory=dict)
    unreadable: frozenset[ToolKey] = frozenset()  # versions that do not compile (immutable)
    built: bool = False  # False before the first build


@dataclass(frozen=True, slots=True)
class _Changes:
    """What ``_read_changes`` found: the catalog at ``version`` against the last build,
    the groups whose digest differs and the rows read for them. The default is a
    catalog where nothing changed."""

    version: int = 0
    digests: Digests = field(default_factory=Digests)
    agents_changed: Set[int] = frozenset()  # agent ids whose row changed, gone ones too
    keys_changed: Set[int] = frozenset()  # agent ids whose live keys changed
    secrets_changed: Set[int] = frozenset()  # workspace ids (none when none are loaded)
    operations_changed: Set[int] = frozenset()  # workspace ids whose published set changed
    identity_changed: Set[int] = frozenset()  # workspace ids whose identity providers changed
    # After the change: the published operations by workspace and name, by bucket,
    # and every agent's row.
    operations: dict[int, dict[str, tuple[int, int]]] = field(default_factory=dict)
    op_buckets: dict[int, list[Published]] = field(default_factory=dict)
    agent_rows: dict[int, dict[str, Any]] = field(default_factory=dict)
    # The agents to look at again (row, workspace operations or secrets changed),
    # the tools they bind that no build has made yet and those tools' spec texts.
    touched: Sequence[int] = ()
    missing: Sequence[ToolKey] = ()
    specs: Mapping[tuple[int, int], str] = field(default_factory=dict)
    key_rows: Sequence[Mapping[str, Any]] = ()  # the live keys of keys_changed
    secret_rows: Sequence[Mapping[str, Any]] = ()  # the sealed secrets of secrets_changed
    # The identity providers by workspace, after the change.
    identity: dict[int, list[dict[str, Any]]] = field(default_factory=dict)


class _Compiled(NamedTuple):
    """The tools once the missing ones are compiled, the versions that do not, how many did."""

    tools: dict[ToolKey, Tool]
    unreadable: frozenset[ToolKey]
    made: int  # tools compiled


class _Agents(NamedTuple):
    """The agents once the touched ones are looked at again, and how many were rebuilt."""

    by_name: dict[tuple[str, str], Agent]  # (workspace, slug) ->
    by_id: dict[int, Agent]
    rebuilt: int


class _Keys(NamedTuple):
    """The live keys once the changed agents' are patched: by hash, and by agent."""

    by_hash: dict[bytes, Key]
    by_agent: dict[int, dict[bytes, Key]]


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
        scopes=frozenset(spec.scopes),
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


async def _read_changes(
    conn: Connection, memo: _Memo, slicer: Slicer, *, secrets: bool
) -> _Changes:
    """What changed since ``memo`` was built, all read in one repeatable-read transaction
    so that the parts agree; ``secrets``: whether secrets are loaded at all."""
    async with conn.transaction():
        await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        cur = await conn.execute("SELECT version FROM catalog_state")
        state = await cur.fetchone()
        version = int(state["version"]) if state else 0
        digests = await read_digests(conn)
        buckets = changed(memo.digests.operations, digests.operations)
        agents_changed = changed(memo.digests.agents, digests.agents)
        keys_changed = changed(memo.digests.keys, digests.keys)
        secrets_ws = changed(memo.digests.secrets, digests.secrets) if secrets else set()
        identity_ws = changed(memo.digests.identity, digests.identity)

        operations, op_buckets, ops_ws = memo.operations, memo.op_buckets, set[int]()
        if buckets:
            rows = await read_operations(conn, buckets & digests.operations.keys(), slicer)
            operations, op_buckets, ops_ws = _operations_after(memo, buckets, rows)
        agent_rows = memo.agent_rows
        if agents_changed:
            agent_rows = {i: r for i, r in agent_rows.items() if i not in agents_changed}
            for r in await read_agents(conn, agents_changed & digests.agents.keys()):
                agent_rows[r["id"]] = r
        identity = memo.identity
        if identity_ws:
            identity = {ws: r for ws, r in identity.items() if ws not in identity_ws}
            for r in await read_identity(conn, identity_ws & digests.identity.keys()):
                identity.setdefault(r["workspace_id"], []).append(r)
        touched = _touched(agent_rows, agents_changed, ops_ws | secrets_ws | identity_ws)
        missing = _missing(touched, agent_rows, operations, memo.tools, memo.unreadable)
        wanted = {(k[0], k[1]) for k in missing}
        specs = {
            (s["operation_id"], s["version"]): s["spec"]
            for s in await read_specs(conn, wanted, slicer)
        }
        key_rows = await read_keys(conn, keys_changed & digests.keys.keys(), slicer)
        secret_rows = await read_secrets(conn, secrets_ws & digests.secrets.keys())
    return _Changes(
        version=version,
        digests=digests,
        agents_changed=agents_changed,
        keys_changed=keys_changed,
        secrets_changed=secrets_ws,
        operations_changed=ops_ws,
        identity_changed=identity_ws,
        operations=operations,
        op_buckets=op_buckets,
        agent_rows=agent_rows,
        touched=touched,
        missing=missing,
        specs=specs,
        key_rows=key_rows,
        secret_rows=secret_rows,
        identity=identity,
    )


def _touched(
    agent_rows: Mapping[int, Mapping[str, Any]], agents: Set[int], workspaces: Set[int]
) -> list[int]:
    """The agents to look at again, in ``agent_rows`` order: those of ``agents`` (whose
    row changed) and those in ``workspaces`` (whose operations, secrets or identity
    providers changed)."""
    return [
        agent_id
        for agent_id, r in agent_rows.items()
        if agent_id in agents or r["workspace_id"] in workspaces
    ]


def _missing(
    touched: Sequence[int],
    agent_rows: Mapping[int, Mapping[str, Any]],
    operations: dict[int, dict[str, tuple[int, int]]],
    tools: Mapping[ToolKey, Tool],
    unreadable: Set[ToolKey],
) -> tuple[ToolKey, ...]:
    """The tools the published ``touched`` agents bind that no build has made yet (nor
    found unreadable), once each, in the order they are first bound."""
    missing: dict[ToolKey, None] = {}
    for agent_id in touched:
        r = agent_rows[agent_id]
        if r["published"] is not None:
            for key in _bound(r, operations):
                if key not in tools and key not in unreadable:
                    missing[key] = None
    return tuple(missing)


async def _compile_missing(
    missing: Sequence[ToolKey],
    specs: Mapping[tuple[int, int], str],
    tools: dict[ToolKey, Tool],
    unreadable: frozenset[ToolKey],
    language: Language,
    slicer: Slicer,
) -> _Compiled:
    """``tools`` and ``unreadable`` with ``missing`` compiled from ``specs``: ``tools``
    itself when nothing is missing, else a copy (the last snapshot's map stays as it
    was). The tools so far are frozen out of the cyclic GC every ``FREEZE_EVERY``."""
    if missing:
        tools = dict(tools)
    failed: set[ToolKey] = set()
    count = 0
    for key in missing:
        text = specs.get((key[0], key[1]))
        if text is None:  # cannot happen in one repeatable read; try again next build
            continue
        tool = _compile(key, text, language)
        if tool is None:
            failed.add(key)
        else:
            tools[key] = tool
            count += 1
            if count % FREEZE_EVERY == 0:
                gc.freeze()  # the tools so far: the collections during the build skip them
        await slicer.tick()
    return _Compiled(tools, unreadable | failed, count)


def _open_changed_secrets(
    secrets: dict[int, Mapping[str, str]],
    workspaces: Set[int],
    rows: Sequence[Mapping[str, Any]],
    options: SnapshotOptions,
) -> dict[int, Mapping[str, str]]:
    """``secrets`` by workspace with those of ``workspaces`` replaced by ``rows`` opened
    with ``options.box`` (a workspace with no row has none left); ``secrets`` itself
    when no workspace changed."""
    if not workspaces:
        return secrets
    assert options.box is not None  # without a box no workspace's secrets are read
    opened = {ws: s for ws, s in secrets.items() if ws not in workspaces}
    opened.update(open_secrets(rows, options.box))
    return opened


async def _rebuild_agents(
    previous: Snapshot,
    changes: _Changes,
    tools: Mapping[ToolKey, Tool],
    secrets: Mapping[int, Mapping[str, str]],
    options: SnapshotOptions,
    slicer: Slicer,
) -> _Agents:
    """``previous``'s agents with the gone ones dropped and ``changes.touched`` looked
    at again (``_agent``); ``previous``'s very maps when no agent changed."""
    by_id = dict(previous.agents_by_id)
    for gone in changes.agents_changed - changes.agent_rows.keys():
        by_id.pop(gone, None)
    egress: dict[int, EgressPolicy] = {}  # one per workspace in this build
    providers: dict[int, dict[str, ProviderSettings]] = {}  # likewise
    rebuilt = 0
    for agent_id in changes.touched:
        old = previous.agents_by_id.get(agent_id)
        row = changes.agent_rows[agent_id]
        workspace_id = row["workspace_id"]
        policy = egress.get(workspace_id)
        if policy is None:
            policy = egress[workspace_id] = egress_from_row(row, workspace_id)
        trusted = providers.get(workspace_id)
        if trusted is None:
            trusted = providers[workspace_id] = providers_by_name(
                changes.identity.get(workspace_id, ()), secrets.get(workspace_id, {})
            )
        # Its row, secrets and providers (an unpublished agent uses none) are
        # unchanged: the same object if its tools are.
        keep = agent_id not in changes.agents_changed and (
            row["published"] is None
            or (
                workspace_id not in changes.secrets_changed
                and workspace_id not in changes.identity_changed
            )
        )
        made = _Made(changes.operations, tools, secrets, policy, trusted, options)
        agent = _agent(row, old, made, keep=keep)
        if agent is not old:
            by_id[agent_id] = agent
            rebuilt += 1
        await slicer.tick()
    if rebuilt or changes.agents_changed:
        return _Agents({(a.workspace, a.slug): a for a in by_id.values()}, by_id, rebuilt)
    return _Agents(previous.agents, previous.agents_by_id, rebuilt)


_UNLISTED = ToolList((), (b"[]",), (b"[]",), b"")  # an unpublished agent's


class _Made(NamedTuple):
    """What an agent is made of besides its row, as one build knows it."""

    operations: dict[int, dict[str, tuple[int, int]]]
    tools: Mapping[ToolKey, Tool]
    secrets: Mapping[int, Mapping[str, str]]
    policy: EgressPolicy  # its workspace's
    providers: Mapping[str, ProviderSettings]  # its workspace's, by name
    options: SnapshotOptions


def _agent(row: Mapping[str, Any], old: Agent | None, made: _Made, *, keep: bool) -> Agent:
    """The agent of ``row``; ``old`` itself when ``keep`` (its row, secrets and
    providers are unchanged) and its tools are the same objects."""
    published = row["published"]
    page_size = made.options.page_size
    if published is None:
        if keep and old is not None and not old.published:
            return old
        return _new_agent(row, made.policy)
    tools = made.tools
    own = tuple(tools[k] for k in _bound(row, made.operations) if k in tools)
    if (
        old is not None
        and old.published
        and len(old.tools) == len(own)
        and all(a is b for a, b in zip(old.tools, own, strict=True))
    ):
        if keep:
            return old
        listing = ToolList(own, old.pages, old.modern_pages, old.fingerprint)
    else:
        listing = tool_list(own, page_size)
    options = made.options
    inputs = access_inputs(
        published,
        row["workspace"],
        row["slug"],
        made.providers,
        frozenset(s for t in own for s in t.scopes),  # for scopes_supported
        options.public_url,
        options.path_prefix,
    )
    access = agent_access(inputs, None if old is None else old.access, options.identity)
    secrets = made.secrets.get(row["workspace_id"], {})
    return _new_agent(row, made.policy, published, listing, secrets, access)


def _new_agent(
    row: Mapping[str, Any],
    policy: EgressPolicy,
    published: Mapping[str, Any] | None = None,
    listing: ToolList = _UNLISTED,
    secrets: Mapping[str, str] | None = None,
    access: AgentAccess = KEYS_ONLY,
) -> Agent:
    """A new ``Agent`` of ``row``: unpublished (no tools, no secrets) when ``published``
    (its published spec) is None."""
    shown = {} if published is None else published
    rate = shown.get("rate_limit")
    return Agent(
        id=row["id"],
        workspace_id=row["workspace_id"],
        workspace=row["workspace"],
        slug=row["slug"],
        published=published is not None,
        title=shown.get("title") or "",
        description=shown.get("description") or "",
        rate_limit=msgspec.convert(rate, RateLimit) if rate else None,
        confirmation_mode=shown.get("confirmation_mode") or "auto",
        approval_wait_s=shown.get("approval_wait_s"),
        tools=listing.tools,
        by_name={t.name: t for t in listing.tools},
        pages=listing.pages,
        modern_pages=listing.modern_pages,
        fingerprint=listing.fingerprint,
        tool_scopes=frozenset(s for t in listing.tools for s in t.scopes),
        secrets={} if secrets is None else secrets,
        egress=policy,
        access=access,
    )


def _patch_keys(
    keys: dict[bytes, Key],
    by_agent: dict[int, dict[bytes, Key]],
    agents: Set[int],
    rows: Sequence[Mapping[str, Any]],
) -> _Keys:
    """``keys`` by hash and ``by_agent`` with the keys of ``agents`` replaced by ``rows``
    (their live keys); copies, or the very maps when no agent's keys changed."""
    if not agents:
        return _Keys(keys, by_agent)
    patched_by_agent = {a: k for a, k in by_agent.items() if a not in agents}
    patched = dict(keys)
    for agent_id in agents:
        for digest in by_agent.get(agent_id, ()):
            patched.pop(digest, None)
    for r in rows:
        expires = r["expires_at"]
        live = Key(
            id=r["id"],
            kind=r["kind"],
            agent_id=r["agent_id"],
            expires_at=None if expires is None else expires.timestamp(),
        )
        digest = bytes(r["hash"])
        patched[digest] = live
        patched_by_agent.setdefault(live.agent_id, {})[digest] = live
    return _Keys(patched, patched_by_agent)


async def _prune_tools(
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


def _assemble(
    changes: _Changes,
    agents: _Agents,
    keys: _Keys,
    secrets: dict[int, Mapping[str, str]],
    tools: dict[ToolKey, Tool],
    unreadable: frozenset[ToolKey],
) -> tuple[Snapshot, _Memo]:
    """The snapshot, and what the next build remembers of it."""
    snapshot = Snapshot(
        version=changes.version,
        loaded_at=time.monotonic(),
        agents=agents.by_name,
        agents_by_id=agents.by_id,
        keys=keys.by_hash,
    )
    memo = _Memo(
        snapshot=snapshot,
        digests=changes.digests,
        operations=changes.operations,
        op_buckets=changes.op_buckets,
        agent_rows=changes.agent_rows,
        keys=keys.by_agent,
        secrets=secrets,
        identity=changes.identity,
        tools=tools,
        unreadable=unreadable,
        built=True,
    )
    return snapshot, memo


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
        changes = await _read_changes(conn, memo, slicer, secrets=options.box is not None)
        compiled = await _compile_missing(
            changes.missing, changes.specs, memo.tools, memo.unreadable, options.language, slicer
        )
        secrets = _open_changed_secrets(
            memo.secrets, changes.secrets_changed, changes.secret_rows, options
        )
        agents = await _rebuild_agents(
            memo.snapshot, changes, compiled.tools, secrets, options, slicer
        )
        keys = _patch_keys(memo.snapshot.keys, memo.keys, changes.keys_changed, changes.key_rows)
        tools = compiled.tools
        if changes.operations_changed or changes.agents_changed:
            tools = await _prune_tools(tools, agents.by_id, slicer)
        snapshot, built = _assemble(changes, agents, keys, secrets, tools, compiled.unreadable)
        if full or compiled.made >= FREEZE_EVERY:
            gc.freeze()  # later collections skip what a large build made
        self._memo = built  # only now: a failed or cancelled build changed nothing
        self.last = BuildStats(
            full=full,
            seconds=time.perf_counter() - started,
            compiled=compiled.made,
            agents_rebuilt=agents.rebuilt,
            keys_changed=len(changes.keys_changed),
        )
        return snapshot


async def load_snapshot(conn: Connection, options: SnapshotOptions | None = None) -> Snapshot:
    """The whole published catalog, built from nothing."""
    return await SnapshotBuilder(options).build(conn)
