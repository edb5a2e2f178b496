"""The phases of a snapshot build, each on its own (mcp_gateway.catalog.builder;
docs/architecture.md, "Snapshot and refresh"): what each hands on, and what it
keeps as the very objects the last build made. The whole build is tested in
test_incremental.py."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import msgspec

from mcp_gateway.catalog.builder import (
    _SPARE_TOOLS,
    SnapshotBuilder,
    ToolKey,
    _Changes,
    _compile_missing,
    _Memo,
    _missing,
    _open_changed_secrets,
    _operations_after,
    _patch_keys,
    _prune_tools,
    _read_changes,
    _rebuild_agents,
    _touched,
)
from mcp_gateway.catalog.changes import Slicer, bucket
from mcp_gateway.catalog.snapshot import Key, Snapshot, SnapshotOptions, Tool
from shared.crypto import SecretBox, secret_associated_data
from shared.db import connect
from tests.support.api import Client, auth
from tests.support.db import TEST_SECRET_KEY
from tests.support.gateway import FRANKFURTER, seed_catalog

OPTIONS = SnapshotOptions(page_size=500)


def tool(name: str, operation_id: int, version: int) -> Tool:
    """A tool as the agents phase sees it: its definitions (it never looks at the rest)."""
    definition = {"name": name, "description": f"{name} version {version}"}
    return Tool(
        name=name,
        operation_id=operation_id,
        version=version,
        definitions=(definition, {**definition, "modern": True}),
        compiled=cast(Any, None),
    )


def row(
    agent_id: int, workspace_id: int, bound: list[str] | None, title: str = ""
) -> dict[str, Any]:
    """An agent's row as changes.read_agents gives it; ``bound`` None: not published."""
    published = None if bound is None else {"operations": bound, "title": title}
    return {
        "id": agent_id,
        "workspace_id": workspace_id,
        "workspace": f"ws{workspace_id}",
        "slug": f"agent{agent_id}",
        "published": published,
        "egress_hosts": None,
        "egress_grants": [],
    }


RATES_V1, RATES_V2, OTHER = (10, 1, "rates"), (10, 2, "rates"), (20, 1, "other")
TOOLS: dict[ToolKey, Tool] = {k: tool(k[2], k[0], k[1]) for k in (RATES_V1, RATES_V2, OTHER)}
# Agents 1 (binds rates) and 2 (unpublished) in workspace 1; agent 3 (binds rates) in 2.
ROWS = {1: row(1, 1, ["rates"]), 2: row(2, 1, None), 3: row(3, 2, ["rates"])}
OPERATIONS = {1: {"rates": (10, 1)}, 2: {"rates": (10, 1)}}


async def first() -> Snapshot:
    """The snapshot a first build makes of ``ROWS``: every agent looked at."""
    changes = _Changes(
        agents_changed=set(ROWS), operations=OPERATIONS, agent_rows=ROWS, touched=list(ROWS)
    )
    made = await _rebuild_agents(Snapshot.empty(), changes, TOOLS, {}, OPTIONS, Slicer())
    assert made.rebuilt == 3
    return Snapshot(1, 0.0, made.by_name, made.by_id, {})


async def test_an_agent_whose_inputs_are_unchanged_stays_the_very_same_object() -> None:
    previous = await first()
    # Workspace 1 published another operation that no agent binds: its agents are looked at.
    operations = {**OPERATIONS, 1: {"rates": (10, 1), "other": (20, 1)}}
    changes = _Changes(
        operations_changed={1}, operations=operations, agent_rows=ROWS, touched=[1, 2]
    )
    agents = await _rebuild_agents(previous, changes, TOOLS, {}, OPTIONS, Slicer())
    assert agents.rebuilt == 0
    assert agents.by_name is previous.agents  # no map was copied either
    assert agents.by_id is previous.agents_by_id


async def test_a_new_tool_version_repages_only_the_agents_that_bind_it() -> None:
    previous = await first()
    old = previous.agents_by_id[1]
    operations = {**OPERATIONS, 1: {"rates": (10, 2)}}
    changes = _Changes(
        operations_changed={1}, operations=operations, agent_rows=ROWS, touched=[1, 2]
    )
    agents = await _rebuild_agents(previous, changes, TOOLS, {}, OPTIONS, Slicer())
    assert agents.rebuilt == 1
    rebuilt = agents.by_id[1]
    assert rebuilt.tools == (TOOLS[RATES_V2],)
    assert b"rates version 2" in rebuilt.pages[0]
    assert b"rates version 2" in rebuilt.modern_pages[0]
    assert rebuilt.fingerprint != old.fingerprint
    assert agents.by_name["ws1", "agent1"] is rebuilt
    assert agents.by_id[2] is previous.agents_by_id[2]  # unpublished, nothing changed
    assert agents.by_id[3] is previous.agents_by_id[3]  # another workspace: not looked at
    assert previous.agents_by_id[1] is old  # the last snapshot's maps stay as they were
    assert previous.agents["ws1", "agent1"] is old


async def test_a_secret_rebuilds_the_agent_but_keeps_its_tools_and_pages() -> None:
    previous = await first()
    changes = _Changes(secrets_changed={1}, operations=OPERATIONS, agent_rows=ROWS, touched=[1, 2])
    secrets = {1: {"TOKEN": "v"}}
    agents = await _rebuild_agents(previous, changes, TOOLS, secrets, OPTIONS, Slicer())
    assert agents.rebuilt == 1
    rebuilt, old = agents.by_id[1], previous.agents_by_id[1]
    assert rebuilt is not old
    assert rebuilt.secrets == {"TOKEN": "v"}
    assert rebuilt.tools[0] is old.tools[0]
    assert rebuilt.pages is old.pages
    assert rebuilt.modern_pages is old.modern_pages
    assert rebuilt.fingerprint == old.fingerprint
    assert agents.by_id[2] is previous.agents_by_id[2]  # unpublished: holds no secrets


async def test_a_changed_row_rebuilds_and_a_gone_agent_leaves_both_maps() -> None:
    previous = await first()
    rows = {1: row(1, 1, ["rates"], title="Renamed"), 2: ROWS[2]}  # agent 3 is deleted
    changes = _Changes(agents_changed={1, 3}, operations=OPERATIONS, agent_rows=rows, touched=[1])
    agents = await _rebuild_agents(previous, changes, TOOLS, {}, OPTIONS, Slicer())
    assert agents.rebuilt == 1
    assert agents.by_id[1].title == "Renamed"
    assert agents.by_id[1].pages is previous.agents_by_id[1].pages  # same tools
    assert set(agents.by_id) == {1, 2}
    assert set(agents.by_name) == {("ws1", "agent1"), ("ws1", "agent2")}
    assert agents.by_id[2] is previous.agents_by_id[2]


async def test_an_unpublished_agent_has_no_tools_pages_or_secrets() -> None:
    unpublished = (await first()).agents_by_id[2]
    assert not unpublished.published
    assert (unpublished.tools, unpublished.by_name, unpublished.secrets) == ((), {}, {})
    assert (unpublished.pages, unpublished.modern_pages) == ((b"[]",), (b"[]",))
    assert unpublished.fingerprint == b""


def key(key_id: int, agent_id: int) -> Key:
    return Key(id=key_id, kind="agent", agent_id=agent_id, expires_at=None)


def test_the_key_patch_replaces_the_changed_agents_keys_only() -> None:
    keys = {b"h1": key(1, 1), b"h2": key(2, 1), b"h3": key(3, 2), b"h4": key(4, 3)}
    by_agent = {1: {b"h1": keys[b"h1"], b"h2": keys[b"h2"]}, 2: {b"h3": keys[b"h3"]}}
    by_agent[3] = {b"h4": keys[b"h4"]}
    expires = datetime(2030, 1, 1, tzinfo=UTC)
    rows = [{"id": 5, "hash": b"h5", "kind": "approval", "agent_id": 1, "expires_at": expires}]
    # Agent 1 revoked both keys and made a new one; agent 3 is gone with its keys.
    patched = _patch_keys(keys, by_agent, {1, 3}, rows)
    new = Key(id=5, kind="approval", agent_id=1, expires_at=expires.timestamp())
    assert patched.by_hash == {b"h3": keys[b"h3"], b"h5": new}
    assert patched.by_agent == {1: {b"h5": new}, 2: {b"h3": keys[b"h3"]}}
    assert patched.by_agent[2] is by_agent[2]  # an unchanged agent's keys are not copied
    assert len(keys) == 4
    assert set(by_agent[1]) == {b"h1", b"h2"}  # the last build's maps stay as they were


def test_no_key_change_keeps_the_very_maps() -> None:
    keys, by_agent = {b"h1": key(1, 1)}, {1: {b"h1": key(1, 1)}}
    patched = _patch_keys(keys, by_agent, set(), [])
    assert patched.by_hash is keys
    assert patched.by_agent is by_agent


async def test_only_the_missing_tools_are_compiled_into_a_copy() -> None:
    known = {RATES_V1: TOOLS[RATES_V1]}
    good, bad, unread = (11, 1, "frankfurter"), (12, 1, "broken"), (13, 1, "unread")
    specs = {(11, 1): msgspec.json.encode(FRANKFURTER).decode(), (12, 1): "{}"}
    compiled = await _compile_missing(
        [good, bad, unread], specs, known, frozenset({OTHER}), "en", Slicer()
    )
    assert compiled.made == 1
    assert set(compiled.tools) == {RATES_V1, good}
    assert compiled.tools[RATES_V1] is known[RATES_V1]
    assert compiled.tools[good].name == "frankfurter"
    assert compiled.unreadable == {OTHER, bad}  # ``unread``'s spec was not read: next build
    assert known == {RATES_V1: TOOLS[RATES_V1]}  # the last build's map stays as it was

    nothing = await _compile_missing((), {}, known, frozenset(), "en", Slicer())
    assert nothing.tools is known
    assert nothing.made == 0


def test_only_the_changed_workspaces_secrets_are_opened() -> None:
    box = SecretBox(TEST_SECRET_KEY)

    def sealed(workspace_id: int, name: str, value: str) -> dict[str, Any]:
        s = box.seal(value, secret_associated_data(workspace_id, name))
        return {
            "workspace_id": workspace_id,
            "name": name,
            "ciphertext": s.ciphertext,
            "nonce": s.nonce,
            "key_id": s.key_id,
        }

    options = SnapshotOptions(box=box)
    kept, stale, gone = {"A": "a"}, {"B": "old"}, {"C": "c"}
    secrets: dict[int, Any] = {1: kept, 2: stale, 3: gone}
    opened = _open_changed_secrets(secrets, {2, 3}, [sealed(2, "B", "new")], options)
    assert opened == {1: {"A": "a"}, 2: {"B": "new"}}
    assert opened[1] is kept
    assert secrets == {1: kept, 2: stale, 3: gone}
    assert _open_changed_secrets(secrets, set(), [], SnapshotOptions()) is secrets


def test_the_touched_agents_and_the_tools_they_miss() -> None:
    rows = {**ROWS, 4: row(4, 3, ["rates", "other", "rates"])}
    operations = {**OPERATIONS, 3: {"rates": (10, 2), "other": (20, 1)}}
    assert _touched(rows, {4}, {1}) == [1, 2, 4]  # in the rows' order
    assert _touched(rows, set(), set()) == []
    known = {RATES_V1: TOOLS[RATES_V1]}
    # Agent 2 is unpublished; agent 4 binds rates twice; other's version does not compile.
    missing = _missing([1, 2, 4], rows, operations, known, frozenset({OTHER}))
    assert missing == (RATES_V2,)


def test_a_publish_copies_only_its_workspaces_operations() -> None:
    ops = [(1, "rates", 10, 1), (2, "rates", 11, 1)]
    memo = _Memo(
        operations={1: {"rates": (10, 1)}, 2: {"rates": (11, 1)}},
        op_buckets={bucket(10): ops},
    )
    published = [
        {"workspace_id": 1, "name": "rates", "id": 10, "latest_version": 2},
        {"workspace_id": 2, "name": "rates", "id": 11, "latest_version": 1},
    ]
    operations, op_buckets, workspaces = _operations_after(memo, {bucket(10)}, published)
    assert workspaces == {1}
    assert operations == {1: {"rates": (10, 2)}, 2: {"rates": (11, 1)}}
    assert operations[2] is memo.operations[2]
    assert memo.operations[1] == {"rates": (10, 1)}
    assert op_buckets[bucket(10)] == [(1, "rates", 10, 2), (2, "rates", 11, 1)]


async def test_replaced_tools_are_pruned_only_past_the_spares() -> None:
    agent = (await first()).agents_by_id[1]
    spares = {(100 + i, 1, "spare"): TOOLS[OTHER] for i in range(_SPARE_TOOLS)}
    tools = {RATES_V1: TOOLS[RATES_V1], **spares}
    assert await _prune_tools(tools, {1: agent}, Slicer()) is tools
    tools[(99, 1, "one more")] = TOOLS[OTHER]
    assert await _prune_tools(tools, {1: agent}, Slicer()) == {RATES_V1: TOOLS[RATES_V1]}


async def test_reading_from_nothing_reads_the_whole_catalog(
    client: Client, admin_token: str, database_url: str
) -> None:
    await seed_catalog(client, admin_token)
    async with await connect(database_url, autocommit=True) as conn:
        changes = await _read_changes(conn, _Memo(), Slicer(), secrets=True)
    assert changes.version > 0
    assert changes.touched == list(changes.agent_rows)
    assert {r["slug"] for r in changes.agent_rows.values()} == {
        "currency-rates",
        "other",
        "unpublished",
    }
    # The one published version, bound by both published agents, is read once.
    assert [k[2] for k in changes.missing] == ["frankfurter_latest_rate"]
    assert set(changes.specs) == {(k[0], k[1]) for k in changes.missing}
    assert len(changes.key_rows) == 4  # an agent key each, and currency-rates' approval key
    assert changes.secret_rows == []


async def test_after_a_key_only_that_agents_keys_are_read(
    client: Client, admin_token: str, database_url: str
) -> None:
    await seed_catalog(client, admin_token)
    builder = SnapshotBuilder(SnapshotOptions(box=SecretBox(TEST_SECRET_KEY)))
    async with await connect(database_url, autocommit=True) as conn:
        await builder.build(conn)
    memo = builder._memo
    created = await client.post(
        "/api/v1/workspaces/default/keys", json={"agent": "other"}, headers=auth(admin_token)
    )
    assert created.is_success, created.text
    async with await connect(database_url, autocommit=True) as conn:
        changes = await _read_changes(conn, memo, Slicer(), secrets=True)
    other = memo.snapshot.agents["default", "other"].id
    assert changes.keys_changed == {other}
    unchanged = (changes.agents_changed, changes.secrets_changed, changes.operations_changed)
    assert unchanged == (set(), set(), set())
    assert (changes.touched, changes.missing, changes.specs) == ([], (), {})
    assert changes.operations is memo.operations
    assert changes.agent_rows is memo.agent_rows
    assert {r["agent_id"] for r in changes.key_rows} == {other}
    assert created.json()["id"] in {r["id"] for r in changes.key_rows}
    assert len(changes.key_rows) == 2
