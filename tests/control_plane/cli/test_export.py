"""``crank export`` against a real control plane, run as CI runs it: export a
workspace, apply the file to an empty one, export that: the same bytes."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import yaml

from control_plane.cli.client import Client
from tests.support.cli import Server, crank
from tests.support.crank_files import SECRETS, SEED

_copies = itertools.count()


def new_workspace(server: Server) -> str:
    slug = f"export-copy-{next(_copies)}"
    Client(server.url, server.admin_token).post("/workspaces", {"slug": slug})
    return slug


def test_export_then_apply_to_an_empty_workspace_reproduces_it_byte_for_byte(
    server: Server, workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    admin = Client(server.url, server.admin_token)
    for name, value in SECRETS.items():
        admin.put(f"/workspaces/{workspace}/secrets/{name}", {"value": value})
    # The seed with identity settings: a provider, an agent's auth, an operation's scopes.
    document = yaml.safe_load(SEED)
    document["identity_providers"] = [{"name": "corp", "issuer": "https://id.example.com"}]
    document["agents"][0]["auth"] = {"providers": ["corp"], "scopes": ["rates:read"]}
    document["operations"][0]["scopes"] = ["rates:read"]
    seed = tmp_path / "seed.yaml"
    seed.write_text(yaml.safe_dump(document, sort_keys=False))
    applied = crank("apply", "-f", str(seed), "--workspace", workspace, "--publish", env=cli_env)
    assert applied.returncode == 0, applied.stderr

    exported = tmp_path / "exported.yaml"
    result = crank(
        "export", "--workspace", workspace, "-o", str(exported), "--no-workspace", env=cli_env
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    assert (
        f"wrote 4 operations and 3 agents and 1 identity providers (drafts) of workspace "
        f"{workspace}" in result.stderr
    )
    text = exported.read_text()
    assert not text.startswith("workspace:")
    assert all(value not in text for value in SECRETS.values())

    target = new_workspace(server)
    copied = crank("apply", "-f", str(exported), "--workspace", target, env=cli_env)
    assert copied.returncode == 0, copied.stderr
    assert "  identity_provider  corp" in copied.stdout
    assert copied.stdout.splitlines()[-1] == "created 8, updated 0, published 0; 0 unchanged"
    again = crank("export", "--workspace", target, "--no-workspace", env=cli_env)
    assert again.returncode == 0, again.stderr
    assert again.stdout == text

    unchanged = crank("apply", "-f", str(exported), "--workspace", workspace, env=cli_env)
    assert "no changes" in unchanged.stdout


def test_published_json_export_names_its_workspace_and_applies_as_it_is(
    server: Server, workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    seed = tmp_path / "seed.yaml"
    seed.write_text(SEED)
    assert crank("apply", "-f", str(seed), "--workspace", workspace, env=cli_env).returncode == 0
    path = tmp_path / "published.json"
    result = crank("export", "--workspace", workspace, "--published", "-o", str(path), env=cli_env)
    assert result.returncode == 0, result.stderr
    document = json.loads(path.read_text())
    assert document == {"workspace": workspace, "operations": [], "agents": []}  # nothing published
    drafts = json.loads(
        crank("export", "--workspace", workspace, "--format", "json", env=cli_env).stdout
    )
    assert drafts["workspace"] == workspace
    assert len(drafts["operations"]) == 4


def test_export_of_an_unknown_workspace_or_without_a_server_exits_2(
    cli_env: dict[str, str], tmp_path: Path
) -> None:
    missing = crank("export", "--workspace", "no-such-workspace", env=cli_env)
    assert missing.returncode == 2
    assert "not_found (404)" in missing.stderr
    no_token = {k: v for k, v in cli_env.items() if k != "CRANK_TOKEN"}
    no_token["CRANK_URL"] = "http://crank.invalid:8000"  # not loopback: no dev token either
    result = crank("export", env=no_token)
    assert result.returncode == 2
    assert "set CRANK_TOKEN" in result.stderr
