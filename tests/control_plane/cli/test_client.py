"""The client commands (``crank apply``, ``keys``, ``secrets``) against a real control plane.

One granian process serves ``control_plane.app:create_app`` for the module on
a database of its own (created and migrated here, so the per-test reset of
the shared test database never touches it); every test works in a workspace
of its own, and runs
the CLI as a separate process, exactly as a CI pipeline would.
"""

from __future__ import annotations

import re
from pathlib import Path

from control_plane.cli.client import Client
from control_plane.cli.devstate import DevState, save_dev_state
from shared.crypto import Sealed, SecretBox, secret_associated_data
from shared.db import connect
from tests.support.cli import OPERATIONS_YAML, Server, clean_env, crank, run_async
from tests.support.db import TEST_SECRET_KEY
from tests.support.processes import free_port


def write_file(tmp_path: Path, workspace: str, *, confirmation: str = "auto") -> Path:
    path = tmp_path / "crank.yaml"
    path.write_text(OPERATIONS_YAML.format(workspace=workspace, confirmation=confirmation))
    return path


def test_apply_prints_the_plan_and_a_second_apply_reports_no_changes(
    workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    path = write_file(tmp_path, workspace)
    first = crank("apply", "-f", str(path), "--publish", env=cli_env)
    assert first.returncode == 0, first.stderr
    lines = first.stdout.splitlines()
    assert re.search(r"operation\s+frankfurter_latest_rate\s+create \+ publish\s+v1", first.stdout)
    assert re.search(r"operation\s+delete_order\s+create \+ publish\s+v1", first.stdout)
    assert re.search(r"agent\s+currency-rates\s+create \+ publish\s+v1", first.stdout)
    assert lines[-1] == "created 3, updated 0, published 3; 0 unchanged"

    second = crank("apply", "-f", str(path), "--publish", env=cli_env)
    assert second.returncode == 0, second.stderr
    assert "no changes" in second.stdout
    assert second.stdout.count("unchanged") >= 3


def catalog_version(server: Server) -> int:
    async def read() -> int:
        async with await connect(server.database_url) as conn:
            cur = await conn.execute("SELECT version FROM catalog_state")
            row = await cur.fetchone()
            assert row is not None
            return int(row["version"])

    return run_async(read())


def test_apply_with_publish_moves_the_catalog_version_by_exactly_one(
    server: Server, workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    path = write_file(tmp_path, workspace)
    before = catalog_version(server)
    applied = crank("apply", "-f", str(path), "--publish", env=cli_env)
    assert applied.returncode == 0, applied.stderr
    assert "published 3" in applied.stdout  # two operations and an agent, one transaction
    assert catalog_version(server) == before + 1


def test_dry_run_says_what_would_change_and_writes_nothing(
    workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    path = write_file(tmp_path, workspace)
    dry = crank("apply", "-f", str(path), "--publish", "--dry-run", env=cli_env)
    assert dry.returncode == 0, dry.stderr
    assert "dry run: nothing was written" in dry.stdout
    assert dry.stdout.splitlines()[-1] == "would create 3, update 0, publish 3; 0 unchanged"
    real = crank("apply", "-f", str(path), env=cli_env)
    assert real.returncode == 0, real.stderr
    assert real.stdout.splitlines()[-1] == "created 3, updated 0, published 0; 0 unchanged"


def test_workspace_flag_targets_a_file_without_one(
    workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "crank.json"
    path.write_text('{"operations": [], "agents": []}')
    result = crank("apply", "-f", str(path), "--workspace", workspace, env=cli_env)
    assert result.returncode == 0, result.stderr
    assert f"workspace {workspace}" in result.stdout
    assert "no changes" in result.stdout

    other = write_file(tmp_path, workspace)
    clash = crank("apply", "-f", str(other), "--workspace", "elsewhere", env=cli_env)
    assert clash.returncode == 2
    assert "--workspace" in clash.stderr


def test_file_with_errors_exits_1_and_names_the_field(
    workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    # Caught by the control plane: DELETE confirmation cannot be switched off.
    refused = crank(
        "apply", "-f", str(write_file(tmp_path, workspace, confirmation="false")), env=cli_env
    )
    assert refused.returncode == 1, refused.stderr
    assert "operations[1] (delete_order).safety.confirmation" in refused.stderr
    assert "nothing was applied" in refused.stderr
    assert refused.stdout == ""

    # Caught before sending: a field the format does not have.
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(
        write_file(tmp_path, workspace)
        .read_text()
        .replace("title: Currency", "colour: red\n    title: Currency")
    )
    result = crank("apply", "-f", str(unknown), env=cli_env)
    assert result.returncode == 1
    assert "agents[0] (currency-rates): Object contains unknown field `colour`" in result.stderr

    listing = Client(cli_env["CRANK_URL"], cli_env["CRANK_TOKEN"]).get(
        f"/workspaces/{workspace}/operations"
    )
    assert listing["items"] == []


def test_malformed_yaml_exits_2_with_the_line(
    workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "broken.yaml"
    path.write_text(f"workspace: {workspace}\noperations:\n  - name: [unclosed\n")
    result = crank("apply", "-f", str(path), env=cli_env)
    assert result.returncode == 2
    assert re.search(r"broken\.yaml:4:\d+: not valid YAML", result.stderr), result.stderr


def test_unreachable_control_plane_or_bad_token_exits_2(
    server: Server, cli_env: dict[str, str], tmp_path: Path
) -> None:
    path = write_file(tmp_path, "default")
    unreachable = {**cli_env, "CRANK_URL": f"http://127.0.0.1:{free_port()}"}
    result = crank("apply", "-f", str(path), env=unreachable)
    assert result.returncode == 2
    assert "connection refused" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1

    wrong_token = {**cli_env, "CRANK_TOKEN": "crk_admin_nope"}
    result = crank("apply", "-f", str(path), env=wrong_token)
    assert result.returncode == 2
    assert "refused the token (401" in result.stderr


def test_dev_state_token_is_used_when_crank_token_is_unset(
    server: Server, workspace: str, tmp_path: Path
) -> None:
    save_dev_state(
        DevState(secret_key=TEST_SECRET_KEY, admin_token=server.admin_token),
        tmp_path / "dev-state.json",
    )
    env = clean_env(
        CRANK_CONTROL_PLANE_PORT=server.url.rsplit(":", 1)[1], CRANK_DATA_DIR=str(tmp_path)
    )
    result = crank("apply", "-f", str(write_file(tmp_path, workspace)), env=env)
    assert result.returncode == 0, result.stderr

    nothing = clean_env(CRANK_URL=server.url, CRANK_DATA_DIR=str(tmp_path / "empty"))
    result = crank("keys", "list", "--workspace", workspace, env=nothing)
    assert result.returncode == 2
    assert "set CRANK_TOKEN" in result.stderr


def test_keys_create_prints_only_the_key_and_revoke_revokes_it(
    workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    assert crank("apply", "-f", str(write_file(tmp_path, workspace)), env=cli_env).returncode == 0
    created = crank(
        "keys", "create", "--workspace", workspace, "--agent", "currency-rates", env=cli_env
    )
    assert created.returncode == 0, created.stderr
    assert re.fullmatch(r"crk_agent_[0-9A-Za-z]+\n", created.stdout)
    key = created.stdout.strip()

    approval = crank(
        "keys",
        "create",
        "--workspace",
        workspace,
        "--agent",
        "currency-rates",
        "--kind",
        "approval",
        "--expires-at",
        "2099-01-01T00:00:00Z",
        env=cli_env,
    )
    assert re.fullmatch(r"crk_approval_[0-9A-Za-z]+\n", approval.stdout), approval.stderr

    listing = crank("keys", "list", "--workspace", workspace, env=cli_env)
    assert listing.returncode == 0, listing.stderr
    assert key[:18] in listing.stdout
    assert key not in listing.stdout
    key_id = listing.stdout.splitlines()[1].split()[0]

    revoked = crank("keys", "revoke", "--workspace", workspace, key_id, env=cli_env)
    assert revoked.returncode == 0, revoked.stderr
    listing = crank("keys", "list", "--workspace", workspace, env=cli_env)
    assert "revoked" in listing.stdout.splitlines()[1]

    unknown_agent = crank(
        "keys", "create", "--workspace", workspace, "--agent", "nope", env=cli_env
    )
    assert unknown_agent.returncode == 1
    assert unknown_agent.stdout == ""


def test_secrets_set_reads_the_value_from_stdin_and_never_prints_it(
    server: Server, workspace: str, cli_env: dict[str, str], tmp_path: Path
) -> None:
    result = crank(
        "secrets", "set", "--workspace", workspace, "ORDERS_TOKEN", env=cli_env, stdin="s3cr3t\n"
    )
    assert result.returncode == 0, result.stderr
    assert "created" in result.stdout
    assert "s3cr3t" not in result.stdout + result.stderr

    value_file = tmp_path / "value"
    value_file.write_text("n3w-value\n")
    result = crank(
        "secrets",
        "set",
        "--workspace",
        workspace,
        "ORDERS_TOKEN",
        "--value-file",
        str(value_file),
        env=cli_env,
    )
    assert result.returncode == 0, result.stderr
    assert "updated" in result.stdout

    async def stored() -> str:
        async with await connect(server.database_url) as conn:
            cur = await conn.execute(
                """SELECT s.workspace_id, s.ciphertext, s.nonce, s.key_id FROM secrets s
                     JOIN workspaces w ON w.id = s.workspace_id
                    WHERE w.slug = %s AND s.name = 'ORDERS_TOKEN'""",
                (workspace,),
            )
            row = await cur.fetchone()
            assert row is not None
        sealed = Sealed(row["ciphertext"], row["nonce"], row["key_id"])
        return SecretBox(TEST_SECRET_KEY).open(
            sealed, secret_associated_data(row["workspace_id"], "ORDERS_TOKEN")
        )

    assert run_async(stored()) == "n3w-value"

    empty = crank("secrets", "set", "--workspace", workspace, "EMPTY", env=cli_env, stdin="")
    assert empty.returncode == 2
    listing = crank("secrets", "list", "--workspace", workspace, env=cli_env)
    assert listing.stdout.startswith("ORDERS_TOKEN")
