"""``crank export``: a workspace as an operation file that ``crank apply`` takes back.

Two views of a workspace, both in the file format of ``shared.engine.spec``:

- **drafts** (the default): every operation's draft and every agent's draft.
  ``crank apply`` of it into an empty workspace reproduces the drafts; with
  ``--publish`` it also publishes them.
- **published**: each operation's latest published version and each published
  agent's published state, i.e. what the gateways serve. Operations never
  published and agents not published are left out.

Publish state itself (version numbers, whether a draft differs from its
version) is not part of the file format, so it is not exported; neither are
keys, and secrets only appear as the names ``request.auth.secret`` (and an identity
provider's ``introspection.client_secret``) refer to. Identity providers are not
versioned: both views hold the workspace's current ones.
An agent's live webhook subscriptions are exported in both views as
``webhooks`` (URL, events, format; never a signing secret); an agent without
any has no ``webhooks`` key, which apply reads as "leave them alone".

An agent binding that the file could not reproduce is dropped: in the
published view, an operation without a published version (the gateways leave
it out of the catalog too); in either view, an operation that no longer exists
(a never-published draft discarded after the agent bound it). Apply would
refuse such a binding, so the file stays applicable; ``Export.dropped`` names
them.

Both lists come from one SQL statement, so the file is one consistent
snapshot even while others write; the identity providers are read by
``services.identity_providers`` in a second one (agents never name a
provider that is gone: it cannot be deleted while named). Fields equal to the format's defaults are
left out, the way a person writes the file (docs/operation-file.md
lists the defaults); applying it fills them in again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, Literal, TypeVar

import msgspec
import yaml

from control_plane.auth import Workspace
from control_plane.errors import Conflict
from control_plane.services.identity_providers import as_spec, list_providers
from shared.db import Connection
from shared.engine.spec import (
    AgentSpec,
    CrankFile,
    FileAgentSpec,
    OperationSpec,
    WebhookSpec,
    agent_from_builtins,
    operation_from_builtins,
)

ExportFormat = Literal["yaml", "json"]

# Each agent's live webhook subscriptions (url, events, format; never a secret).
_WEBHOOKS: Final = """
           (SELECT coalesce(jsonb_object_agg(h.slug, h.hooks), '{}')
              FROM (SELECT a.slug,
                           jsonb_agg(jsonb_build_object('url', s.url, 'events', s.events,
                                                        'format', s.format)
                                     ORDER BY s.created_at, s.id) AS hooks
                      FROM webhook_subscriptions s JOIN agents a ON a.id = s.agent_id
                     WHERE s.workspace_id = %(ws)s AND s.revoked_at IS NULL
                     GROUP BY a.slug) h) AS webhooks"""

_DRAFTS: Final = (
    """
    SELECT (SELECT coalesce(jsonb_agg(o.draft ORDER BY o.name), '[]')
              FROM operations o WHERE o.workspace_id = %(ws)s) AS operations,
           (SELECT coalesce(jsonb_agg(a.draft || jsonb_build_object('slug', a.slug)
                                      ORDER BY a.slug), '[]')
              FROM agents a WHERE a.workspace_id = %(ws)s) AS agents,"""
    + _WEBHOOKS
)

_PUBLISHED: Final = (
    """
    SELECT (SELECT coalesce(jsonb_agg(v.spec ORDER BY o.name), '[]')
              FROM operations o
              JOIN operation_versions v ON v.operation_id = o.id AND v.version = o.latest_version
             WHERE o.workspace_id = %(ws)s) AS operations,
           (SELECT coalesce(jsonb_agg(a.published || jsonb_build_object('slug', a.slug)
                                      ORDER BY a.slug), '[]')
              FROM agents a WHERE a.workspace_id = %(ws)s AND a.published IS NOT NULL) AS agents,"""
    + _WEBHOOKS
)


@dataclass(frozen=True, slots=True)
class DroppedBinding:
    agent: str
    operation: str


@dataclass(frozen=True, slots=True)
class Export:
    file: CrankFile
    dropped: list[DroppedBinding] = field(default_factory=list)


T = TypeVar("T", OperationSpec, AgentSpec)


def _decode(convert: Callable[[Any], T], kind: str, key: str, value: Any) -> T:
    try:
        return convert(value)
    except msgspec.ValidationError as exc:
        # Stored before a format change: refuse rather than write a file apply rejects.
        name = value.get(key) if isinstance(value, dict) else None
        raise Conflict(
            f"the stored {kind} {name!r} no longer fits the file format ({exc}); "
            "save it again through the API, then export",
            code="stored_spec_invalid",
        ) from None


async def export_workspace(conn: Connection, ws: Workspace, *, published: bool) -> Export:
    """The workspace as an operation file (drafts, or what is published), and bindings dropped."""
    cur = await conn.execute(_PUBLISHED if published else _DRAFTS, {"ws": ws.id})
    row = await cur.fetchone()
    assert row is not None  # the subselects always answer one row
    operations = [
        _decode(operation_from_builtins, "operation", "name", value) for value in row["operations"]
    ]
    known = {op.name for op in operations}
    agents: list[FileAgentSpec] = []
    dropped: list[DroppedBinding] = []
    for value in row["agents"]:
        agent = _decode(agent_from_builtins, "agent", "slug", value)
        dropped += [DroppedBinding(agent.slug, n) for n in agent.operations if n not in known]
        kept = [name for name in agent.operations if name in known]
        hooks = row["webhooks"].get(agent.slug)
        agents.append(
            FileAgentSpec(
                **msgspec.structs.asdict(msgspec.structs.replace(agent, operations=kept)),
                webhooks=None if hooks is None else msgspec.convert(hooks, list[WebhookSpec]),
            )
        )
    providers = [as_spec(view) for view in await list_providers(conn, ws)]
    file = CrankFile(
        workspace=ws.slug, identity_providers=providers, operations=operations, agents=agents
    )
    return Export(file, dropped)


def _default(spec_field: msgspec.structs.FieldInfo) -> Any:
    if spec_field.default is not msgspec.NODEFAULT:
        return spec_field.default
    if spec_field.default_factory is not msgspec.NODEFAULT:
        return spec_field.default_factory()
    return msgspec.NODEFAULT


def compact(value: Any) -> Any:
    """Plain data of a spec, leaving out every field equal to its default."""
    if isinstance(value, msgspec.Struct):
        document: dict[str, Any] = {}
        for spec_field in msgspec.structs.fields(value):
            item = getattr(value, spec_field.name)
            if not spec_field.required and item == _default(spec_field):
                continue
            document[spec_field.encode_name] = compact(item)
        return document
    if isinstance(value, list):
        return [compact(item) for item in value]
    return msgspec.to_builtins(value)


def to_document(file: CrankFile, *, with_workspace: bool = True) -> dict[str, Any]:
    """The file as plain data in the format's field order: workspace, identity providers
    (only when there are any), operations, agents."""
    document: dict[str, Any] = {}
    if with_workspace and file.workspace is not None:
        document["workspace"] = file.workspace
    if file.identity_providers:
        document["identity_providers"] = compact(file.identity_providers)
    document["operations"] = compact(file.operations)
    document["agents"] = compact(file.agents)
    return document


class _Dumper(yaml.SafeDumper):
    """Block style with indented lists (as docs/operation-file.md writes them), no
    anchors, multi-line strings as literal blocks."""

    def ignore_aliases(self, data: Any) -> bool:
        return True

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _represent_str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _represent_str)


def render(document: dict[str, Any], fmt: ExportFormat) -> bytes:
    """The document as YAML or JSON, as a person would write it."""
    if fmt == "json":
        return msgspec.json.format(msgspec.json.encode(document), indent=2) + b"\n"
    text = yaml.dump(
        document,
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        default_flow_style=False,
        width=100,
    )
    return text.encode()
